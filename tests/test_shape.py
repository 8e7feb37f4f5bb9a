"""DraftShape: the arithmetic of a chain, a dynamic (EAGLE-2) tree and a static tree."""

from __future__ import annotations

from autotune.schema.config import DecodeConfig, shape_of_mapping
from autotune.schema.shape import CHAIN, DYNAMIC, STATIC, DraftShape

STATIC_PATHS = ((0,), (1,), (0, 0), (0, 0, 0))


def shape(**knobs) -> DraftShape:
    return DecodeConfig(**knobs).shape


def test_kinds_follow_the_config():
    assert shape(k=4).kind == CHAIN
    assert shape(tree_width=3, tree_depth=4).kind == DYNAMIC
    assert shape(tree_choices=STATIC_PATHS).kind == STATIC
    assert shape(k=4) == DraftShape.of(DecodeConfig(k=4))
    assert not shape(k=4).is_tree and shape(tree_choices=STATIC_PATHS).is_tree


def test_chain():
    chain = shape(k=4)
    assert (chain.pool_size, chain.tree_nodes, chain.nodes, chain.levels) == (0, 0, 4, 4)
    assert chain.verified_depth == 0 and chain.chain_length == 4
    assert not chain.one_path
    assert chain.scratch_room() == 0           # drafts never run past the token budget
    assert chain.waste() is None
    assert chain.label() == "k=4"


def test_dynamic_tree():
    tree = shape(tree_width=3, tree_depth=4)
    assert tree.pool_size == 3 + 3 * 3 * 3     # width at level 1, width² per later level
    assert tree.tree_nodes == tree.nodes == 30  # no budget: every drafted node
    assert tree.levels == tree.verified_depth == tree.chain_length == 4
    assert not tree.one_path
    assert tree.scratch_room() == 31           # every node plus the root
    assert tree.waste() is None
    assert tree.label() == "tree w3 d4"
    assert tree.loss_label() == ("tree_width=3", ("tree_depth",))

    budget = shape(tree_width=3, tree_depth=4, tree_tokens=10)
    assert budget.pool_size == 30 and budget.tree_nodes == budget.nodes == 10
    assert budget.label() == "tree w3 d4 t10"
    assert budget.loss_label() == ("tree_width=3", ("tree_depth", "tree_tokens"))
    assert budget.waste() is None


def test_dynamic_tree_room_covers_the_fed_levels():
    # 5 nodes kept, but the drafter feeds width x (depth - 1) = 8 nodes into its cache.
    assert shape(tree_width=4, tree_depth=3, tree_tokens=5).scratch_room() == 9


def test_a_small_budget_caps_the_verified_depth():
    tree = shape(tree_width=2, tree_depth=4, tree_tokens=2)
    assert tree.levels == 4 and tree.verified_depth == 2 and tree.chain_length == 2


def test_width_one_is_one_path():
    tree = shape(tree_width=1, tree_depth=5)
    assert tree.one_path and tree.pool_size == tree.tree_nodes == 5


def test_waste_rule():
    assert "keeps all 30 nodes" in shape(tree_width=3, tree_depth=4, tree_tokens=30).waste()
    assert "keeps all 30 nodes" in shape(tree_width=3, tree_depth=4, tree_tokens=40).waste()
    assert "tree_tokens=3 < tree_depth=4" in shape(tree_width=3, tree_depth=4,
                                                   tree_tokens=3).waste()
    assert shape(tree_width=3, tree_depth=4, tree_tokens=4).waste() is None


def test_static_tree():
    tree = shape(tree_choices=STATIC_PATHS)
    assert tree.pool_size == 0
    assert tree.tree_nodes == tree.nodes == 4
    assert tree.levels == tree.verified_depth == tree.chain_length == 3
    assert not tree.one_path                    # path (1,) takes the second child
    assert shape(tree_choices=((0,), (0, 0))).one_path
    assert tree.scratch_room() == 5
    assert tree.waste() is None
    assert tree.label() == "tree choices(4)"
    assert tree.loss_label() == ("tree_choices=[[0], [1], [0, 0], [0, 0, 0]]", ())
    many = shape(tree_choices=tuple((i,) for i in range(9)))
    assert many.loss_label() == ("tree_choices=[9 paths, depth 1]", ())


def test_of_mapping_reads_canonical_keys():
    stored = {"method": "layer_skip", "k": 3, "tree_width": 2, "tree_depth": 2,
              "tree_tokens": None, "attn_skip": [1]}
    assert shape_of_mapping(stored) == DraftShape(DYNAMIC, k=3, width=2, depth=2)
    assert shape_of_mapping({"k": 5}) == DraftShape(CHAIN, k=5)
    assert shape_of_mapping({"tree_width": "wide"}) is None
