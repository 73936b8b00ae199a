"""The README starts with the two commands a new user runs, and CI runs the second one."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_readme_opens_with_the_main_job_and_the_test_suite():
    main_job, tests = _commands()
    assert main_job == ("bash scripts/setup_env.sh && .venv/bin/python run_mindformer_memopt.py "
                        "--config configs/llama_tiny.yaml --run_mode train")
    assert tests == "bash scripts/setup_env.sh && .venv/bin/python -m pytest"


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert _commands()[1] in ci
