"""The documentation site builds with ``mkdocs build --strict`` (no broken link, no missing page),
its config-group pages list every registered option (the example plugin's too, once it is
installed), README.md is its front page, and the recorded plots are in it.

Skipped when the ``docs`` extra (mkdocs, mkdocs-material, mkdocstrings) is not installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from corral.testing.modules import import_path

for _module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
    pytest.importorskip(_module, reason="the docs extra is not installed: pip install 'corral[docs]'")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "corral-plugin-example"


def hooks() -> ModuleType:
    """docs/hooks/corral_site.py, loaded by path as mkdocs loads it."""
    return import_path(ROOT / "docs" / "hooks" / "corral_site.py", "corral_docs_site_hooks")


@pytest.fixture(scope="module")
def example_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example plugin pip-installed offline into its own ``--target`` directory."""
    root = tmp_path_factory.mktemp("docs_example_plugin")
    src, target = root / "src", root / "site-packages"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".pytest_cache"))
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(target), str(src)],
        env=env, capture_output=True, text=True, timeout=180,
    )
    assert proc.returncode == 0, f"pip install of the example failed:\n{proc.stdout}\n{proc.stderr}"
    return target


@pytest.fixture(scope="module")
def built(example_site: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The site built with the example plugin installed, and `corral plugins --json` from the same
    environment."""
    out = tmp_path_factory.mktemp("docs_site") / "site"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(example_site), env.get("PYTHONPATH")])),
               NO_MKDOCS_2_WARNING="1", PYTHONDONTWRITEBYTECODE="1")
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                            "-d", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=280)
    listing = subprocess.run([sys.executable, "-m", "corral.framework.cli", "plugins", "--json"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=120)
    assert listing.returncode == 0, listing.stderr
    return {"build": build, "site": out, "plugins": json.loads(listing.stdout)}


def page(built: dict[str, Any], path: str) -> str:
    return (built["site"] / path).read_text()


def test_mkdocs_build_strict_passes(built: dict[str, Any]) -> None:
    build = built["build"]
    assert build.returncode == 0, f"mkdocs build --strict failed:\n{build.stdout[-4000:]}\n{build.stderr[-4000:]}"


def test_option_pages_list_every_registered_option_with_its_fields(built: dict[str, Any]) -> None:
    components = built["plugins"]["components"]
    assert not built["plugins"]["failed"]
    distributions = {c["distribution"] for c in components}
    assert {"corral", "corral-plugin-example"} <= distributions, distributions
    missing = []
    for c in components:
        html = page(built, f"options/{c['kind']}/index.html")
        if f'id="{c["kind"]}-{c["name"]}"' not in html:
            missing.append(f"{c['kind']}={c['name']}")
        missing += [f"{c['kind']}.{f['name']} ({c['name']})" for f in c["config"]
                    if f"<code>{c['kind']}.{f['name']}</code>" not in html]
    assert not missing, f"options missing from the generated pages: {missing}"
    index = page(built, "options/index.html")
    assert all(f"<code>{c['name']}</code>" in index for c in components)


def test_experiment_presets_page_lists_corral_and_plugin_presets(built: dict[str, Any]) -> None:
    html = page(built, "options/experiment/index.html")
    presets = [p.stem for p in (ROOT / "corral" / "conf" / "experiment").glob("*.yaml")]
    assert presets and all(f'id="experiment-{name}"' in html for name in presets)
    assert 'id="experiment-example_quick"' in html  # the example plugin's preset, from its search path


def test_readme_is_the_front_page(built: dict[str, Any]) -> None:
    html = page(built, "index.html")
    for command in ("scripts/bootstrap &amp;&amp; .venv/bin/python train.py",
                    "scripts/bootstrap &amp;&amp; .venv/bin/python -m pytest"):
        assert command in html
    assert 'href="architecture/"' in html  # README's docs/architecture.md link points into the site


def test_recorded_plots_are_in_the_site(built: dict[str, Any]) -> None:
    html = page(built, "results/index.html")
    plots = sorted(p.name for p in (ROOT / "experiments" / "results").glob("*.png"))
    assert plots
    for name in plots:
        assert f"repo/experiments/results/{name}" in html, name
        assert (built["site"] / "repo" / "experiments" / "results" / name).exists(), name


def test_links_out_of_docs_are_rewritten_into_the_site() -> None:
    site = hooks()
    assert site.rewrite_links("plugins.md", "[ex](../examples/corral-plugin-example/)") == \
        "[ex](repo/examples/corral-plugin-example/README.md)"
    assert site.rewrite_links("index.md", "see [the layers](docs/architecture.md#the-layers)") == \
        "see [the layers](architecture.md#the-layers)"
    assert site.rewrite_links("results.md", "![p](../experiments/results/x.png)") == \
        "![p](repo/experiments/results/x.png)"
    untouched = "[web](https://hydra.cc) [here](#top) ```\n[code](../x.md)\n```"
    assert site.rewrite_links("index.md", untouched) == untouched
