"""The README starts with the two commands a new user runs, and CI runs the second one."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_readme_opens_with_the_main_job_and_the_test_suite():
    main_job, tests = _commands()
    assert main_job == ("bash scripts/setup_env.sh && .venv/bin/python run_mindformer_memopt.py "
                        "--config configs/qwen3_tiny.yaml --run_mode train")
    assert tests == "bash scripts/setup_env.sh && .venv/bin/python -m pytest"


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert _commands()[1] in ci


def test_the_readme_is_a_short_user_guide_whose_links_resolve():
    text = (ROOT / "README.md").read_text()
    assert len(text.encode()) <= 15 * 1024
    links = [link for link in re.findall(r"\]\(([^)#]+)\)", text) if "://" not in link]
    assert links and all((ROOT / link).exists() for link in links), links


# Pointers to documents outside the repository: the docs, configs and code stand alone.
OUTSIDE = re.compile(r"\.\./shared|shared/seeds|seed documents?\b|\bseeds? 00[0-4]\b|\bseed case\b",
                     re.IGNORECASE)


def test_the_pointer_check_would_see_a_pointer():
    assert OUTSIDE.search("see the seed documents in `../shared/seeds/`") and OUTSIDE.search("(seed 003)")
    assert not OUTSIDE.search("fresh (seed 20261124)")


def test_nothing_sends_the_reader_outside_the_repository():
    files = [*ROOT.glob("*.md"), *ROOT.glob("docs/*.md"), ROOT / "benchmarks" / "README.md",
             *ROOT.glob("configs/**/*.yaml"), *ROOT.glob("mf_memopt/**/*.py"), *ROOT.glob("benchmarks/*.py")]
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}" for path in files
             for number, line in enumerate(path.read_text().splitlines(), 1) if OUTSIDE.search(line)]
    assert found == []
