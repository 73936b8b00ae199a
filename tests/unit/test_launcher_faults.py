"""The launcher's answers to a bad output directory, a second run, Ctrl-C, bad training sections and
a dtype the backend cannot run: one clear line each, before anything heavy where possible."""

from __future__ import annotations

from pathlib import Path

import pytest
from launching import TINY, launch

from mf_memopt.document.source import parse_yaml
from mf_memopt.models.llama.backend import backend_issues
from mf_memopt.runtime.outputs import OutputError, check_output_dir, write_report

# --- output directory (no MindSpore needed) ---------------------------------------------------

def test_an_output_dir_under_a_regular_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(OutputError, match=r"output directory .*/file/out lies under .*/file, which is not a "
                                          r"directory"):
        check_output_dir(tmp_path / "file" / "out")


def test_an_unwritable_output_dir_is_refused():
    with pytest.raises(OutputError, match=r"output directory /sys/mf_memopt_out is not writable \("):
        check_output_dir(Path("/sys/mf_memopt_out"))


def test_the_launcher_refuses_a_bad_output_dir_before_building_anything(tmp_path):
    (tmp_path / "file").write_text("")
    done = launch(str(TINY), "--output_dir", str(tmp_path / "file" / "out"), cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr == (f"run_mindformer_memopt.py: output directory {tmp_path}/file/out lies under "
                           f"{tmp_path}/file, which is not a directory\n")
    assert "Set select" not in done.stdout and not (tmp_path / "output").exists()


def test_a_second_report_keeps_the_first_unless_forced(tmp_path):
    report = tmp_path / "apply_report.json"
    assert write_report(report, "first", force=False) == f"apply report written to {report}"
    said = write_report(report, "second", force=False)
    kept = [path for path in tmp_path.iterdir() if path.name != "apply_report.json"]
    assert len(kept) == 1 and kept[0].read_text() == "first" and report.read_text() == "second"
    assert said == (f"apply report written to {report}; the previous run's is kept as {kept[0].name} "
                    "(--force replaces it)")
    assert write_report(report, "third", force=True) == (f"apply report written to {report}, replacing the "
                                                         "previous one (--force)")
    assert report.read_text() == "third" and len(list(tmp_path.iterdir())) == 2


# --- backend limits (no MindSpore needed) -----------------------------------------------------

def test_bfloat16_on_cpu_names_the_key_and_line():
    source = parse_yaml("model:\n  model_config:\n    type: LlamaConfig\n    use_rope_slice: True\n"
                        "    fused_rms_norm: False\n    compute_dtype: bfloat16\n", "m.yaml")
    (issue,) = backend_issues(source.get(("model", "model_config")), "CPU", source)
    assert issue.render() == ("m.yaml:6: model.model_config.compute_dtype: bfloat16 has no CPU kernels in MindSpore "
                              "(kernel selection fails, e.g. Reshape of BFloat16) (use float32 (or float16) on "
                              "CPU; bfloat16 runs on Ascend)")
    assert backend_issues(source.get(("model", "model_config")), "Ascend", source) == []


def test_llama_defaults_that_cpu_cannot_run_are_named():
    source = parse_yaml("model:\n  model_config:\n    type: LlamaConfig\n    compute_dtype: float32\n", "m.yaml")
    rendered = [issue.render() for issue in backend_issues(source.get(("model", "model_config")), "CPU",
                                                           source)]
    assert rendered == [
        "m.yaml:2: model.model_config.fused_rms_norm: is True (LlamaConfig's default: the key is not written): the "
        "fused RmsNorm kernel has no CPU implementation (set fused_rms_norm: False on CPU)",
        "m.yaml:2: model.model_config.use_rope_slice: is False (LlamaConfig's default: the key is not written): "
        "without it the rotary embedding needs a broadcasting BatchMatMul, which has no CPU implementation "
        "(set use_rope_slice: True on CPU)"]


# --- the launcher with MindFormers ---------------------------------------------------------------
