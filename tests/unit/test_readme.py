"""The README starts with the two commands a new user runs, and CI runs the second one; the documents a user
reads stay short, and their links and anchors resolve."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


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


# The documents a user reads: every relative link and #anchor resolves, and they stay short enough to read.
DOCUMENTS = ["README.md", "benchmarks/README.md", *sorted(f"docs/{path.name}" for path in ROOT.glob("docs/*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.DOTALL)
    headings = re.findall(r"^#+ +(.+?) *$", text, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


def _broken_links(document: str) -> list[str]:
    path = ROOT / document
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.DOTALL)
    broken = []
    for link in LINK.findall(text):
        if "://" in link or link.startswith("mailto:"):
            continue
        target, _, anchor = link.partition("#")
        resolved = (path.parent / target).resolve() if target else path
        if not resolved.exists() or (anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved)):
            broken.append(link)
    return broken


def test_the_anchor_rule_is_githubs():
    assert _anchors(ROOT / "benchmarks" / "README.md") >= {"g-hostile-inputs-hostilepy", "benchmarks"}
    assert "balancing-the-pipeline---balance" in _anchors(ROOT / "docs" / "auto.md")


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_link_and_anchor_resolves(document):
    broken = _broken_links(document)
    assert not broken, f"{document}: links or anchors that do not resolve: {broken}"


def test_the_benchmark_results_and_the_docs_stay_short():
    """benchmarks/README.md is a results page (history lives in git), docs/ a reference a user can read through."""
    results = (ROOT / "benchmarks" / "README.md").stat().st_size
    docs = sorted(((path.stat().st_size, f"docs/{path.name}") for path in ROOT.glob("docs/*.md")), reverse=True)
    total = sum(size for size, _ in docs)
    biggest = ", ".join(f"{name} {size / 1024:.1f} KiB" for size, name in docs[:3])
    assert results <= 30 * 1024, f"benchmarks/README.md is {results / 1024:.1f} KiB, over 30 KiB"
    assert total <= 100 * 1024, f"docs/ is {total / 1024:.1f} KiB in all, over 100 KiB; the biggest: {biggest}"
