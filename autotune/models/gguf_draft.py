"""A truncated-layer draft as a GGUF file llama.cpp loads: the target's first L blocks,
its token embedding, final norm and output head, byte for byte.

llama-server's `draft-simple` drafts with a second model (`-md FILE.gguf`). The draft
autotune has without training is the target's own first layers (an early exit, what
`sorted_exit` drafts from): in a GGUF that is the same file with blocks L.. dropped and
`<arch>.block_count` set to L. Tensors are copied in their stored quantisation (no
re-quantisation, so the draft's first L layers compute exactly what the target's do on
the same tokens); every other metadata key (tokenizer included) is copied as it is,
which llama.cpp's vocabulary check (`common_speculative_are_compatible`) needs.

Files are written once per (source file, L) into a cache folder and reused; a partial
write never stands in for a finished one (written beside, then renamed).
Torch-free (the `gguf` package and numpy only): exports call it too.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.common.errors import AutotuneError
from autotune.common.files import file_version

if TYPE_CHECKING:
    from gguf import GGUFReader, GGUFWriter

# One block's tensors: `blk.<index>.<name>` (gguf-py's MODEL_TENSOR names, llama.cpp's
# llama-arch.cpp LLM_TENSOR_NAMES).
BLOCK_TENSOR = re.compile(r"^blk\.(\d+)\.")
# Keys the writer sets itself (GGUFWriter.__init__ writes general.architecture; the
# GGUF.* pseudo-fields are the reader's view of the header).
WRITER_KEYS = ("general.architecture",)


def block_count(source: Path) -> int:
    """The number of transformer blocks in a GGUF file (`<arch>.block_count`); read once
    per file version (reading parses the whole vocabulary: seconds)."""
    return _block_count(source.resolve(), file_version(source))


@functools.lru_cache(maxsize=32)
def _block_count(source: Path, version: str) -> int:
    from gguf import GGUFReader
    reader = GGUFReader(source)
    return int(_field(reader, f"{_arch(reader)}.block_count"))


def write_truncated(source: Path, layers: int, dest: Path) -> Path:
    """Write `source` with only its first `layers` blocks to `dest` (atomically); `dest`.

    One-line AutotuneError where `source` is not a GGUF file or `layers` is not in
    1..block_count-1 (all blocks would be the target itself)."""
    from gguf import GGUFReader, GGUFWriter
    if layers < 1:
        raise AutotuneError(f"a truncated draft keeps at least 1 block, not {layers}")
    try:
        reader = GGUFReader(source)
    except (OSError, ValueError) as exc:
        raise AutotuneError(f"cannot read {source} as GGUF: {exc}") from None
    arch = _arch(reader)
    total = int(_field(reader, f"{arch}.block_count"))
    if not 1 <= layers < total:
        raise AutotuneError(f"a truncated draft keeps 1..{total - 1} of {source.name}'s "
                            f"{total} blocks, not {layers}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
    writer = GGUFWriter(partial, arch)
    try:
        try:
            _copy_truncated(reader, writer, arch, layers)
        finally:
            writer.close()                 # flushed before the rename; closed on an error
        os.replace(partial, dest)
    finally:
        partial.unlink(missing_ok=True)
    return dest


def _copy_truncated(reader: "GGUFReader", writer: "GGUFWriter", arch: str,
                    layers: int) -> None:
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in WRITER_KEYS:
            continue
        value = layers if key == f"{arch}.block_count" else field.contents()
        sub_type = field.types[1] if len(field.types) > 1 else None
        writer.add_key_value(key, value, field.types[0], sub_type)
    for tensor in reader.tensors:
        block = BLOCK_TENSOR.match(tensor.name)
        if block and int(block.group(1)) >= layers:
            continue
        # Stored bytes as they are: raw_dtype keeps the quantisation (the reader's array
        # of a quantised tensor is its bytes per row, which the writer reads).
        writer.add_tensor(tensor.name, tensor.data, raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()


def cached_truncated(source: Path, layers: int, cache: Path) -> Path:
    """The truncated draft of `source` at `layers` blocks under `cache`, written on first
    use; keyed by the source's path, size and mtime, so an edited file is not reused."""
    dest = cache / f"{source.stem}-{file_version(source)}-first{layers}.gguf"
    if dest.is_file():
        return dest
    return write_truncated(source, layers, dest)


def _arch(reader: "GGUFReader") -> str:
    return str(_field(reader, "general.architecture"))


def _field(reader: "GGUFReader", key: str) -> object:
    field = reader.fields.get(key)
    if field is None:
        raise AutotuneError(f"the GGUF file has no {key}: not a model llama.cpp loads")
    return field.contents()


def main(argv: list[str] | None = None) -> int:
    """`python -m autotune.models.gguf_draft SOURCE LAYERS DEST`: what an exported
    llama-server script runs where its draft file is missing."""
    import argparse
    import sys
    parser = argparse.ArgumentParser(prog="python -m autotune.models.gguf_draft",
                                     description="Write a GGUF model's first LAYERS "
                                     "blocks as a draft llama.cpp loads.")
    parser.add_argument("source", type=Path)
    parser.add_argument("layers", type=int)
    parser.add_argument("dest", type=Path)
    args = parser.parse_args(argv)
    try:
        if not args.source.is_file():
            raise AutotuneError(f"GGUF file not found: {args.source}")
        write_truncated(args.source, args.layers, args.dest)
    except AutotuneError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.dest} (the first {args.layers} blocks of {args.source})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
