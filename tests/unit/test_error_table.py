"""Bad input, one row per problem: the key path, the line and the words the user sees.

Each row is a small YAML document. The layout prefix puts `recompute_config` or
`swap_config` on line 4, so line numbers in the rows are easy to read off.
"""

from __future__ import annotations

import textwrap

import pytest

from mf_memopt import ConfigError, load_plan
from mf_memopt.config.load import plan_source
from mf_memopt.document.source import parse_yaml

LAYOUT = "model:\n  model_config:\n    num_layers: 4\n"
SWAP_ON = "swap_config:\n  swap: true\n"


def _doc(body: str, prefix: str = LAYOUT) -> str:
    return prefix + textwrap.dedent(body).lstrip("\n")


def _issues(text: str):
    """(errors, warnings) for a document; errors are empty when it loads."""
    try:
        plan = plan_source(parse_yaml(text, "case.yaml"))
    except ConfigError as error:
        return list(error.issues), []
    return [], list(plan.warnings)


# id, document, key path, line, words in the message (or hint), severity
ROWS = [
    ("unknown key with did-you-mean", _doc("""
        recompute_config:
          recompue: true
     """), "recompute_config.recompue", 5, "did you mean `recompute`?", "error"),
    ("unknown key in a swap entry", _doc("""
        swap_config:
          swap: true
          op_swap:
            - op_nme: attention
              op_name: attention
              backward_prefetch: 1
              layers: [0]
     """), "swap_config.op_swap[0].op_nme", 7, "did you mean `op_name`?", "error"),
    ("unknown swap key", _doc("""
        swap_config:
          swap: true
          op_swaps: []
     """), "swap_config.op_swaps", 6, "did you mean `op_swap`?", "error"),
    ("wrong type for recompute", _doc("""
        recompute_config:
          recompute: 'yes'
     """), "recompute_config.recompute", 5, "expected true/false, per-stage counts", "error"),
    ("wrong type for swap", _doc("""
        swap_config:
          swap: 'yes'
     """), "swap_config.swap", 5, "expected true/false, got string 'yes'", "error"),
    ("negative count (MindFormers loops forever)", _doc("""
        recompute_config:
          recompute: [-1]
     """), "recompute_config.recompute[0]", 5, "must be >= 0, got -1", "error"),
    ("negative count in a 2-D list", _doc("""
        recompute_config:
          select_recompute: [[1, -2]]
     """), "recompute_config.select_recompute[0][1]", 5, "must be >= 0, got -2", "error"),
    ("float count", _doc("""
        recompute_config:
          recompute: [2.0]
     """), "recompute_config.recompute[0]", 5, "got float 2.0", "error"),
    ("mixed counts and patterns", _doc("""
        recompute_config:
          select_recompute: [1, 'feed_forward']
     """), "recompute_config.select_recompute", 5, "a list of patterns", "error"),
    ("negative count in a pattern dict", _doc("""
        recompute_config:
          select_recompute:
            'feed_forward\\.mul': -1
     """), "recompute_config.select_recompute['feed_forward\\.mul']", 6, "got integer -1", "error"),
    ("empty pattern dict", _doc("""
        recompute_config:
          select_recompute: {}
     """), "recompute_config.select_recompute", 5, "must not be empty", "error"),
    ("more counts than pipeline stages", _doc("""
        recompute_config:
          recompute: [1, 1]
     """), "recompute_config.recompute", 5, "has 2 counts but there are 1 pipeline stage(s)", "error"),
    ("counts list that looks like layer indices", _doc("""
        recompute_config:
          recompute: [0, 3]
     """), "recompute_config.recompute", 5, "set swap_config.swap: true", "error"),
    ("fewer counts than pipeline stages", _doc("""
        parallel_config:
          pipeline_stage: 2
        recompute_config:
          recompute: [1]
     """), "recompute_config.recompute", 7, "the missing pipeline stages get 0", "warning"),
    ("more 2-D rows than interleave chunks", _doc("""
        recompute_config:
          recompute: [[1], [1]]
     """), "recompute_config.recompute", 5, "has 2 rows but there are 1 interleave chunk(s)", "error"),
    ("count above the stage size", _doc("""
        recompute_config:
          recompute: [9]
     """), "recompute_config.recompute[0]", 5, "count 9 is more than the 4 layers of stage 0", "warning"),
    ("2-D counts with swap on", _doc("""
        recompute_config:
          recompute: [[0, 1]]
     """, LAYOUT + SWAP_ON), "recompute_config.recompute[0]", 7,
     "swap_config.swap is true, so recompute keys take true/false or layer indices", "error"),
    ("layer index out of range", _doc("""
        recompute_config:
          recompute: [1, 7]
     """, LAYOUT + SWAP_ON), "recompute_config.recompute[1]", 7, "layer 7 does not exist: the model has 4 layers",
     "error"),
    ("layer index out of range in a select dict", _doc("""
        recompute_config:
          select_recompute:
            'feed_forward': [4]
     """, LAYOUT + SWAP_ON), "recompute_config.select_recompute['feed_forward'][0]", 8, "layer 4 does not exist",
     "error"),
    ("negative layer index", _doc("""
        swap_config:
          swap: true
          layer_swap:
            - backward_prefetch: 1
              layers: [0, -2]
     """), "swap_config.layer_swap[0].layers[1]", 8, "must be >= 0, got -2", "error"),
    ("op_swap layer out of range", _doc("""
        swap_config:
          swap: true
          op_swap:
            - op_name: attention
              backward_prefetch: 1
              layers: [2, 4]
     """), "swap_config.op_swap[0].layers[1]", 9, "layer 4 does not exist", "error"),
    ("layer listed twice in one list", _doc("""
        swap_config:
          swap: true
          layer_swap:
            - backward_prefetch: 1
              layers: [1, 2, 1]
     """), "swap_config.layer_swap[0].layers[2]", 8, "layer 1 is listed twice", "error"),
    ("same layer in two op_swap entries of one pattern", _doc("""
        swap_config:
          swap: true
          op_swap:
            - op_name: attention
              backward_prefetch: 20
              layers: [0, 1]
            - op_name: attention
              backward_prefetch: 10
              layers: [1, 3]
     """), "swap_config.op_swap[1]", 10, "layer(s) [1] are already swapped by swap_config.op_swap[0], line 7",
     "error"),
    ("overlapping layer_swap entries", _doc("""
        swap_config:
          swap: true
          layer_swap:
            - backward_prefetch: 20
              layers: true
            - backward_prefetch: 5
              layers: [3]
     """), "swap_config.layer_swap[1]", 9, "layer(s) [3] are already swapped by swap_config.layer_swap[0]", "error"),
    ("pattern listed twice", _doc("""
        recompute_config:
          select_recompute: ['feed_forward', 'attention', 'feed_forward']
     """), "recompute_config.select_recompute[2]", 5, "pattern `feed_forward` is listed twice", "error"),
    ("invalid regex (MindFormers raises a bare regex.error)", _doc("""
        recompute_config:
          select_recompute: ['feed_forward\\.(mul']
     """), "recompute_config.select_recompute[0]", 5, "is not a valid regular expression", "error"),
    ("invalid regex in op_name", _doc("""
        swap_config:
          swap: true
          op_swap:
            - op_name: ['attention', 'w[1']
              backward_prefetch: 1
              layers: [0]
     """), "swap_config.op_swap[0].op_name[1]", 7, "segment `w[1` of pattern `w[1`", "error"),
    ("empty pattern segment", _doc("""
        recompute_config:
          select_recompute: ['feed_forward\\.']
     """), "recompute_config.select_recompute[0]", 5, "has an empty segment", "error"),
    ("pattern that matches dunder attributes (MindFormers crashes)", _doc("""
        recompute_config:
          select_recompute: ['feed_forward\\..*']
     """), "recompute_config.select_recompute[0]", 5, "also matches Python attributes such as `__class__`",
     "warning"),
    ("unescaped dot in a pattern", _doc("""
        recompute_config:
          select_recompute: ['feed_forward.mul']
     """), "recompute_config.select_recompute[0]", 5, "did you mean `feed_forward\\.mul`?", "warning"),
    ("missing op_name (MindFormers raises KeyError)", _doc("""
        swap_config:
          swap: true
          op_swap:
            - backward_prefetch: 1
              layers: [0]
     """), "swap_config.op_swap[0]", 7, "missing required key `op_name`", "error"),
    ("missing backward_prefetch", _doc("""
        swap_config:
          swap: true
          layer_swap:
            - layers: [0]
     """), "swap_config.layer_swap[0]", 7, "missing required key `backward_prefetch`", "error"),
    ("missing layers", _doc("""
        swap_config:
          swap: true
          layer_swap:
            - backward_prefetch: 2
     """), "swap_config.layer_swap[0]", 7, "missing required key `layers`", "error"),
    ("negative backward_prefetch", _doc("""
        swap_config:
          swap: true
          layer_swap:
            - backward_prefetch: -1
              layers: [0]
     """), "swap_config.layer_swap[0].backward_prefetch", 7, "must be >= 0, got -1", "error"),
    ("misspelt Auto", _doc("""
        swap_config:
          swap: true
          op_swap:
            - op_name: attention
              backward_prefetch: auto
              layers: [0]
     """), "swap_config.op_swap[0].backward_prefetch", 8, "did you mean `Auto`?", "error"),
    ("fractional backward_prefetch", _doc("""
        swap_config:
          swap: true
          op_swap:
            - op_name: attention
              backward_prefetch: 1.5
              layers: [0]
     """), "swap_config.op_swap[0].backward_prefetch", 8, "expected an integer >= 0 or 'Auto', got float 1.5",
     "error"),
    ("layers given as a word", _doc("""
        swap_config:
          swap: true
          layer_swap:
            - backward_prefetch: 1
              layers: all
     """), "swap_config.layer_swap[0].layers", 8, "expected true or a list of layer indices, got string 'all'",
     "error"),
    ("op_swap given as a string", _doc("""
        swap_config:
          swap: true
          op_swap: attention
     """), "swap_config.op_swap", 6, "got string 'attention'", "error"),
    ("bad default_prefetch", _doc("""
        swap_config:
          swap: true
          default_prefetch: -3
     """), "swap_config.default_prefetch", 6, "must be >= 0, got -3", "error"),
    ("default_prefetch next to swap lists", _doc("""
        swap_config:
          swap: true
          default_prefetch: 3
          layer_swap:
            - backward_prefetch: 1
              layers: [0]
     """), "swap_config.default_prefetch", 6, "only sets the default strategy", "warning"),
    ("swap lists with swap off", _doc("""
        swap_config:
          swap: false
          op_swap:
            - op_name: attention
              backward_prefetch: 1
              layers: [0]
     """), "swap_config.op_swap", 6, "ignored because swap_config.swap is not true", "warning"),
    ("swap on with nothing to swap", _doc("""
        swap_config:
          swap: true
          layer_swap: []
     """), "swap_config", 4, "nothing is swapped", "warning"),
    ("offsets that do not sum to the remainder", """\
model:
  model_config:
    num_layers: 10
    offset: [1, 0, 0, 0]
parallel_config:
  pipeline_stage: 4
""", "model.model_config.offset", 4, "the offsets add 1 layers over all stages and chunks, but num_layers (10) % "
     "(pipeline_stage (4) * pp_interleave_num (1)) = 2", "error"),
    ("integer offset other than the remainder (MindFormers sums the offsets as written)", """\
model:
  model_config:
    num_layers: 10
    offset: 1
parallel_config:
  pipeline_stage: 4
""", "model.model_config.offset", 4, "the offsets add 1 layers as written (MindFormers checks an integer offset "
     "before giving it to every stage), but num_layers (10) % (pipeline_stage (4) * pp_interleave_num (1)) = 2",
     "error"),
    ("integer offset equal to the remainder: every stage gets it, more slots than layers", """\
model:
  model_config:
    num_layers: 10
    offset: 2
parallel_config:
  pipeline_stage: 4
""", "model.model_config.offset", 4, "make 16 layer slots for the 10 layers (num_layers (10)); MindFormers checks the "
     "offsets as written and fills the slots in order, so stage 2 gets 2 of its 4, stage 3 gets 0 of its 4",
     "warning"),
    ("per-stage offset under interleave, summed as written (MindFormers refuses [1, 1, 1, 0])", """\
model:
  model_config:
    num_layers: 62
    offset: [1, 1, 1, 0]
    pp_interleave_num: 2
parallel_config:
  pipeline_stage: 4
parallel:
  pipeline_config:
    pipeline_interleave: true
""", "model.model_config.offset", 4, "the offsets add 3 layers as written (MindFormers checks a per-stage list before "
     "repeating it for each of the 2 chunks), but num_layers (62) % (pipeline_stage (4) * pp_interleave_num (2)) = 6",
     "error"),
    ("per-stage offset under interleave adding up to the remainder (MindFormers accepts [2, 2, 1, 1])", """\
model:
  model_config:
    num_layers: 62
    offset: [2, 2, 1, 1]
    pp_interleave_num: 2
parallel_config:
  pipeline_stage: 4
parallel:
  pipeline_config:
    pipeline_interleave: true
""", "model.model_config.offset", 4, "make 68 layer slots for the 62 layers (num_layers (62)); MindFormers checks the "
     "offsets as written and fills the slots in order, so chunk 1 of stage 3 gets 2 of its 8", "warning"),
    ("a repeated offset that leaves a middle stage no layer", """\
model:
  model_config:
    num_layers: 7
    offset: 3
parallel_config:
  pipeline_stage: 4
""", "model.model_config.offset", 4, "so stage 2 would get no layer: every stage but the first and last needs one",
     "error"),
    ("more pipeline stages than layers", """\
model:
  model_config:
    num_layers: 3
parallel_config:
  pipeline_stage: 4
""", "parallel_config.pipeline_stage", 5, "the 4 pipeline stages outnumber the layers, num_layers (3): no offsets can "
     "give every stage a layer, and MindFormers refuses it", "error"),
    ("more interleave chunks than layers", """\
model:
  model_config:
    num_layers: 6
    pp_interleave_num: 2
parallel_config:
  pipeline_stage: 4
parallel:
  pipeline_config:
    pipeline_interleave: true
""", "model.model_config.pp_interleave_num", 4, "the pipeline_stage (4) x pp_interleave_num (2) = 8 interleave chunks "
     "outnumber the layers, num_layers (6): MindFormers refuses it", "error"),
    ("offset list of the wrong length", """\
model:
  model_config:
    num_layers: 8
    offset: [0, 0, 0]
parallel_config:
  pipeline_stage: 2
""", "model.model_config.offset", 4, "offset has 3 values, expected one per pipeline stage (2)", "error"),
    ("a middle stage left without layers", """\
model:
  model_config:
    num_layers: 3
    offset: [1, -1, 0]
parallel_config:
  pipeline_stage: 3
""", "model.model_config.offset", 4, "chunk 0 of stage 1 gets 0", "error"),
    ("offset with one stage", """\
model:
  model_config:
    num_layers: 4
    offset: 1
""", "model.model_config.offset", 4, "offset is ignored with a single pipeline stage", "warning"),
    ("interleave without pipeline_interleave", """\
model:
  model_config:
    num_layers: 8
    pp_interleave_num: 2
parallel_config:
  pipeline_stage: 2
""", "model.model_config.pp_interleave_num", 4, "interleaved pipelining is off", "warning"),
    ("zero_bubble_v layout", """\
model:
  model_config:
    num_layers: 8
parallel:
  pipeline_config:
    pipeline_scheduler: zero_bubble_v
""", "parallel.pipeline_config.pipeline_scheduler", 6, "zero_bubble_v layer order is not supported", "error"),
    ("missing num_layers", """\
model:
  model_config:
    hidden_size: 64
recompute_config:
  recompute: true
""", "model.model_config.num_layers", 2, "the plan needs the number of decoder layers", "error"),
    ("num_layers beyond any model (the fuzzer's out-of-memory case)", """\
model:
  model_config:
    num_layers: 225993744687
parallel_config:
  pipeline_stage: 225993744687
""", "model.model_config.num_layers", 3, "must be <= 10000, got 225993744687", "error"),
    ("pipeline_stage beyond any cluster", """\
model:
  model_config:
    num_layers: 8
parallel_config:
  pipeline_stage: 20000
""", "parallel_config.pipeline_stage", 5, "must be <= 10000, got 20000", "error"),
    ("num_layers as a float", """\
model:
  model_config:
    num_layers: 4.0
""", "model.model_config.num_layers", 3, "expected an integer, got float 4.0", "error"),
    ("swap with SOMAS", _doc("""
        context:
          memory_optimize_level: O1
        swap_config:
          swap: true
     """), "context.memory_optimize_level", 5, "SOMAS does not support heterogeneous", "error"),
    ("swap in PyNative mode", _doc("""
        context:
          mode: 1
        swap_config:
          swap: true
     """), "context.mode", 5, "swap needs static graph mode", "error"),
    ("swap with jit_level O2", _doc("""
        context:
          jit_config:
            jit_level: O2
        swap_config:
          swap: true
     """), "context.jit_config.jit_level", 6, "swap supports jit_level O0 or O1 only", "error"),
    ("swap on a model outside the documented scope", _doc("""
        swap_config:
          swap: true
     """, "model:\n  model_config:\n    type: Glm2Config\n    num_layers: 4\n"), "model.model_config.type", 3,
     "documented for Llama-family dense models", "warning"),
    ("recompute options without full recompute", _doc("""
        recompute_config:
          recompute_slice_activation: true
     """), "recompute_config.recompute_slice_activation", 5, "only applies to full-recompute layers", "warning"),
    ("misspelt section", _doc("""
        swap_conifg:
          swap: true
     """), "swap_conifg", 4, "did you mean `swap_config`?", "warning"),
    ("duplicate YAML key", _doc("""
        recompute_config:
          recompute: true
          recompute: false
     """), "recompute_config.recompute", 6, "duplicate key: YAML keeps only the last value", "error"),
    ("invalid YAML", _doc("""
        recompute_config:
          select_recompute: ["feed_forward\\.mul"]
     """), "", 5, "invalid YAML", "error"),
    # compress_config
    ("unknown compress key", _doc("""
        compress_config:
          compress: true
          op_compres: []
     """), "compress_config.op_compres", 6, "did you mean `op_compress`?", "error"),
    ("unknown key in an op_compress entry", _doc("""
        compress_config:
          compress: true
          op_compress:
            - op_name: 'feed_forward\\.w2'
              methd: int8
              method: int8
              layers: true
     """), "compress_config.op_compress[0].methd", 8, "did you mean `method`?", "error"),
    ("unknown compression method", _doc("""
        compress_config:
          compress: true
          op_compress:
            - op_name: 'feed_forward\\.w2'
              method: int3
              layers: true
     """), "compress_config.op_compress[0].method", 8, "did you mean `int8`?", "error"),
    ("compress_dense level typo", _doc("""
        compress_config:
          compress: true
          compress_dense: levl0
     """), "compress_config.compress_dense", 6, "did you mean `level0`?", "error"),
    ("group size that does not pack into bytes", _doc("""
        compress_config:
          compress: true
          op_compress:
            - op_name: 'feed_forward\\.w2'
              method: int2
              group_size: 100
              layers: true
     """), "compress_config.op_compress[0].group_size", 9, "multiple of 8", "error"),
    ("missing method", _doc("""
        compress_config:
          compress: true
          op_compress:
            - op_name: 'feed_forward\\.w2'
              layers: true
     """), "compress_config.op_compress[0]", 7, "missing required key `method`", "error"),
    ("compressed layer out of range", _doc("""
        compress_config:
          compress: true
          op_compress:
            - op_name: 'feed_forward\\.w2'
              method: int8
              layers: [0, 4]
     """), "compress_config.op_compress[0].layers[1]", 9, "layer 4 does not exist", "error"),
    ("same pattern and layer compressed twice", _doc("""
        compress_config:
          compress: true
          op_compress:
            - op_name: 'feed_forward\\.w2'
              method: int8
              layers: [0, 1]
            - op_name: 'feed_forward\\.w2'
              method: int2
              layers: [1]
     """), "compress_config.op_compress[1]", 10, "already compressed by compress_config.op_compress[0]", "error"),
    ("invalid regex in op_compress", _doc("""
        compress_config:
          compress: true
          op_compress:
            - op_name: 'feed_forward\\.(w2'
              method: int8
              layers: true
     """), "compress_config.op_compress[0].op_name", 7, "not a valid regular expression", "error"),
    ("compress lists with compress false", _doc("""
        compress_config:
          compress: false
          compress_dense: level0
     """), "compress_config.compress_dense", 6, "ignored because compress_config.compress is not true", "warning"),
    ("compress true with nothing to compress", _doc("""
        compress_config:
          compress: true
     """), "compress_config.compress", 5, "nothing is compressed", "warning"),
    ("group_size with lossless", _doc("""
        compress_config:
          compress: true
          op_compress:
            - op_name: 'feed_forward\\.w2'
              method: lossless
              group_size: 64
              layers: true
     """), "compress_config.op_compress[0].group_size", 9, "lossless compression has no groups", "warning"),
]


@pytest.mark.parametrize(("document", "path", "line", "words", "severity"),
                         [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_problem_is_reported_at_its_key_and_line(document, path, line, words, severity):
    errors, warnings = _issues(document)
    found = errors if severity == "error" else warnings
    if severity == "warning":
        assert not errors, [issue.render() for issue in errors]
    matches = [issue for issue in found if issue.path == path and issue.line == line
               and words in f"{issue.message} ({issue.hint})"]
    assert matches, "\n".join(issue.render() for issue in errors + warnings)


def test_every_problem_is_reported_in_one_error():
    text = _doc("""
        recompute_config:
          recompute: [-1]
          select_recompute: ['feed_forward\\.(']
        swap_config:
          swap: false
          op_swap:
            - op_name: attention
              layers: [9]
    """)
    errors, _ = _issues(text)
    assert [(issue.path, issue.line) for issue in errors] == [
        ("recompute_config.recompute[0]", 5),
        ("recompute_config.select_recompute[0]", 6),
        ("swap_config.op_swap[0]", 10),
    ]


def test_error_message_lists_file_line_path_and_hint():
    with pytest.raises(ConfigError) as raised:
        load_plan({"model": {"model_config": {"num_layers": 2}}, "recompute_config": {"recompue": True}})
    assert str(raised.value).splitlines() == [
        "1 problem in the memory-optimisation config:",
        "<mapping>: recompute_config.recompue: unknown key `recompue` (did you mean `recompute`?)",
    ]


def test_legal_configs_that_crash_mindformers_load():
    # MindFormers raises TypeError on {pattern: False} with swap on; here it selects no layers.
    plan = load_plan({"model": {"model_config": {"num_layers": 2}}, "swap_config": {"swap": True},
                      "recompute_config": {"select_recompute": {"feed_forward": False}}})
    assert [layer.select_recompute for layer in plan.layers] == [(), ()]
