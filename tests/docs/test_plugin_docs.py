"""docs/plugins.md documents every hook spec: a ``### corral_xxx`` heading per hook listing each
argument (as ``\\`name\\```). Adding a hook, or an argument, without documenting it fails here."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from types import ModuleType

from corral.framework import hookspecs
from corral.framework.hookspecs import hookspec

DOC = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"


def hook_specs(module: ModuleType) -> dict[str, list[str]]:
    """Hook name -> argument names, for every function of ``module`` marked with ``@hookspec``."""
    marker = f"{hookspec.project_name}_spec"
    return {
        name: list(inspect.signature(obj).parameters)
        for name, obj in vars(module).items()
        if inspect.isfunction(obj) and hasattr(obj, marker)
    }


def hook_sections(text: str) -> dict[str, str]:
    """``### corral_xxx`` heading -> the text up to the next heading of level 3 or above."""
    sections: dict[str, str] = {}
    for match in re.finditer(r"^### (corral_\w+)[ \t]*\n(.*?)(?=^#{1,3} |\Z)", text, flags=re.M | re.S):
        sections[match.group(1)] = match.group(2)
    return sections


def undocumented(specs: dict[str, list[str]], text: str) -> list[str]:
    """Every way ``text`` fails to document ``specs``: missing headings, unlisted arguments."""
    sections = hook_sections(text)
    problems = []
    for name, args in sorted(specs.items()):
        body = sections.get(name)
        if body is None:
            problems.append(f"{name}: no '### {name}' heading in docs/plugins.md")
            continue
        problems += [f"{name}: argument `{arg}` is not listed" for arg in args if f"`{arg}`" not in body]
    return problems


def test_the_hookspecs_are_found() -> None:
    specs = hook_specs(hookspecs)
    assert {"corral_register", "corral_config_searchpath", "corral_validate_config", "corral_run_start",
            "corral_epoch_end", "corral_run_end"} <= set(specs)
    assert specs["corral_epoch_end"] == ["trainer", "epoch", "stats"]


def test_every_hookspec_is_documented_with_its_arguments() -> None:
    assert undocumented(hook_specs(hookspecs), DOC.read_text()) == []


def test_every_documented_hook_exists() -> None:
    stale = sorted(set(hook_sections(DOC.read_text())) - set(hook_specs(hookspecs)))
    assert stale == [], f"docs/plugins.md documents hooks that corral does not define: {stale}"


def test_a_hook_added_without_docs_fails_the_check() -> None:
    """The check is not vacuous: a synthetic hookspec module with one more hook, and a known hook
    with one more argument, are both reported."""
    synthetic = ModuleType("synthetic_hookspecs")
    exec(  # noqa: S102 - defines two hook specs the way hookspecs.py does
        "def corral_synthetic_missing_hook(trainer, batch):\n"
        "    '''Not documented anywhere.'''\n"
        "def corral_epoch_end(trainer, epoch, stats, synthetic_new_argument):\n"
        "    '''A documented hook that gained an argument.'''\n",
        synthetic.__dict__,
    )
    for name in ("corral_synthetic_missing_hook", "corral_epoch_end"):
        setattr(synthetic, name, hookspec(getattr(synthetic, name)))
    specs = {**hook_specs(hookspecs), **hook_specs(synthetic)}
    assert undocumented(specs, DOC.read_text()) == [
        "corral_epoch_end: argument `synthetic_new_argument` is not listed",
        "corral_synthetic_missing_hook: no '### corral_synthetic_missing_hook' heading in docs/plugins.md",
    ]


def documented_errors(text: str) -> list[tuple[list[str], str]]:
    """``$ python train.py <overrides>`` lines of the docs followed by a ``corral: error: ...`` line."""
    pairs = re.findall(r"^\$ python train\.py (.*)\ncorral: error: (.*)$", text, flags=re.M)
    return [(command.split(), message) for command, message in pairs]


def test_the_documented_config_errors_are_what_corral_prints() -> None:
    """The error lines shown in docs/plugins.md are the real messages ("..." stands for elided text)."""
    from corral.framework.entry import prepare
    from corral.framework.errors import ConfigError
    from corral.framework.precheck import precheck

    prepare([])
    pairs = documented_errors(DOC.read_text())
    assert len(pairs) >= 4
    for overrides, message in pairs:
        try:
            precheck(overrides)  # what train.py runs before Hydra starts
        except ConfigError as exc:
            actual = str(exc)
        else:
            raise AssertionError(f"{overrides} composed without an error")
        pos = 0
        for part in message.split("..."):
            found = actual.find(part.strip(" ;"), pos)
            assert found >= 0, f"{overrides}: documented {message!r}\nbut corral says {actual!r}"
            pos = found + len(part.strip(" ;"))
