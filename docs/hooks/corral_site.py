"""mkdocs hooks that assemble corral's documentation site (listed under ``hooks:`` in mkdocs.yml).

- **README.md is the front page**: the site's ``index.md`` is the README itself, so the two
  cannot drift apart.
- **One page per config group** (``options/<group>.md``), generated at build time from corral's
  plugin registry through the same code as ``corral plugins --json``: every installed
  distribution's options with every config field, its type, default and help. Installing a
  plugin (the example package, say) and rebuilding adds its options; nothing is written by hand,
  so nothing goes stale. ``options/experiment.md`` lists the presets on Hydra's search path.
- **Links to files outside docs/** (recorded results and their plots in experiments/results/,
  the example plugin, source files) are rewritten to copies of those files placed in the site
  under ``repo/``, so the site is complete on its own and ``mkdocs build --strict`` still fails
  on a link to a file that does not exist.
- **No page is orphaned**: a page in docs/ that the nav in mkdocs.yml does not list is added at
  the end of the nav, under "More".
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import posixpath
import re
from importlib import resources
from pathlib import Path
from typing import Any, Iterator

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
LOG = logging.getLogger("mkdocs.hooks.corral_site")

#: What each config group is, for the top of its page (a group a plugin adds gets a generic line).
GROUPS: dict[str, str] = {
    "trainer": "How a run is driven: epochs of `batch_size` steps, evaluation, logging, snapshots and resume.",
    "algo": "The learning algorithm; its hyperparameters are `algo.*`.",
    "env": "Environment presets (the meta-RL ones have tasks); `env=gym` takes any gymnasium `env.id`.",
    "policy": "The agent a worker runs: its network and how it turns observations into actions.",
    "sampler": "How workers are run: in this process, in worker processes, as Ray actors, or behind an "
               "action server. See [Samplers](../samplers.md) for when to use each.",
    "worker": "How one worker steps its environments and cuts episodes.",
    "logger": "Where statistics go; a list: `logger=[console,csv,tensorboard]`.",
    "normalize": "Observation and reward normalisation.",
}

#: A markdown link or image target: ``[text](target)`` / ``![alt](target "title")``.
LINK = re.compile(r"(!?\[[^\]\n]*\]\()([^)\s]+)((?:\s+\"[^\"]*\")?\))")
FENCE = re.compile(r"^(```|~~~)", re.M)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


# ---------------------------------------------------------------------------------------------
# where a page comes from, and where a repository file goes in the site
def repo_path_of(src_uri: str) -> str:
    """The repository path a page of the site was made from."""
    if src_uri == "index.md":
        return "README.md"
    if src_uri.startswith("repo/"):
        return src_uri[len("repo/"):]
    return f"docs/{src_uri}"


def site_path_of(repo_path: str) -> str:
    """Where a repository file lives in the site."""
    if repo_path == "README.md":
        return "index.md"
    if repo_path.startswith("docs/"):
        return repo_path[len("docs/"):]
    return f"repo/{repo_path}"


def outside_fences(markdown: str) -> Iterator[tuple[bool, str]]:
    """``(is_prose, chunk)`` pieces of ``markdown``: code fences are left alone."""
    pos, inside = 0, False
    for match in FENCE.finditer(markdown):
        yield not inside, markdown[pos:match.start()]
        pos, inside = match.start(), not inside
    yield not inside, markdown[pos:]


def resolve(src_uri: str, target: str) -> str | None:
    """The repository path a relative link of page ``src_uri`` points to (None: leave it alone)."""
    if not target or target.startswith(("#", "/")) or SCHEME.match(target):
        return None
    path = target.split("#", 1)[0].split("?", 1)[0]
    if not path:
        return None
    repo_path = posixpath.normpath(posixpath.join(posixpath.dirname(repo_path_of(src_uri)), path))
    if repo_path.startswith("../"):
        return None
    if (ROOT / repo_path).is_dir() and (ROOT / repo_path / "README.md").exists():
        repo_path = f"{repo_path}/README.md"
    return repo_path


def links_of(src_uri: str, markdown: str) -> Iterator[str]:
    """Repository paths of the files that ``markdown`` links to."""
    for prose, chunk in outside_fences(markdown):
        if prose:
            for match in LINK.finditer(chunk):
                repo_path = resolve(src_uri, match.group(2))
                if repo_path is not None:
                    yield repo_path


def rewrite_links(src_uri: str, markdown: str) -> str:
    """Point every link of page ``src_uri`` at the site's copy of its target."""

    def fix(match: re.Match[str]) -> str:
        target = match.group(2)
        repo_path = resolve(src_uri, target)
        if repo_path is None:
            return match.group(0)
        anchor = "#" + target.split("#", 1)[1] if "#" in target else ""
        new = posixpath.relpath(site_path_of(repo_path), posixpath.dirname(src_uri) or ".") + anchor
        return f"{match.group(1)}{new}{match.group(3)}"

    return "".join(LINK.sub(fix, chunk) if prose else chunk for prose, chunk in outside_fences(markdown))


# ---------------------------------------------------------------------------------------------
# the plots of the recorded results
PLOTS_MARKER = "<!-- corral:plots -->"


def plots_section() -> str:
    """Every plot in experiments/results/, under the recorded result (markdown file) it belongs to:
    the one whose name is the longest prefix of the plot's name."""
    results = ROOT / "experiments" / "results"
    tables = sorted((p.stem for p in results.glob("*.md")), key=len, reverse=True)
    groups: dict[str, list[str]] = {}
    for plot in sorted(results.glob("*.png")):
        owner = next((t for t in tables if plot.stem.startswith(t)), plot.stem)
        groups.setdefault(owner, []).append(plot.name)
    lines = []
    for owner in sorted(groups):
        lines += [f"### {owner}", ""]
        if (results / f"{owner}.md").exists():
            lines += [f"Recorded in [`{owner}.md`](../experiments/results/{owner}.md).", ""]
        lines += [f"![{name}](../experiments/results/{name})" for name in groups[owner]] + [""]
    return "\n".join(lines)


def expand_markers(markdown: str) -> str:
    """Fill in the generated parts of a hand-written page."""
    if PLOTS_MARKER in markdown:
        markdown = markdown.replace(PLOTS_MARKER, plots_section())
    return markdown


# ---------------------------------------------------------------------------------------------
# the option pages
def registry_json() -> dict[str, Any]:
    """``corral plugins --json``: every registered component and every plugin that failed."""
    from corral.framework.cli import plugins_command

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        plugins_command(["--json"])
    return json.loads(out.getvalue())


def cell(value: Any) -> str:
    """A value as a markdown table cell."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def group_page(kind: str, components: list[dict[str, Any]]) -> str:
    """``options/<kind>.md``: every option of one config group with its fields."""
    lines = [f"# `{kind}`", "", GROUPS.get(kind, f"Options of the `{kind}` config group."), "",
             f"Choose one with `python train.py {kind}=<option>`; set a field with "
             f"`{kind}.<field>=<value>`. This page is generated from the plugin registry when the site is "
             "built (the same listing as `corral plugins`), so it shows exactly the options installed.", "",
             "| option | from | what it is |", "|---|---|---|"]
    for c in components:
        lines.append(f"| [`{c['name']}`](#{kind}-{c['name']}) | {cell(c['distribution'])} | {cell(c['help'])} |")
    for c in components:
        lines += ["", f"## `{kind}={c['name']}` {{#{kind}-{c['name']}}}", "",
                  f"{c['help']}" if c["help"] else "", "",
                  f"From **{c['distribution']} {c['version']}** (plugin `{c['plugin']}`).", ""]
        if not c["config"]:
            lines.append("No config fields.")
            continue
        lines += ["| field | type | default | help |", "|---|---|---|---|"]
        for f in c["config"]:
            lines.append(f"| `{kind}.{f['name']}` | `{cell(f['type'])}` | `{cell(repr(f['default']))}` | "
                         f"{cell(f['help'])} |")
    return "\n".join(lines) + "\n"


def experiment_dirs() -> list[tuple[str, Path]]:
    """(where, directory) of every ``experiment/`` preset directory on Hydra's search path."""
    from corral.framework.config import searchpath

    dirs: list[tuple[str, Path]] = [("corral", ROOT / "corral" / "conf" / "experiment")]
    for entry in searchpath():
        if entry.startswith("pkg://"):
            package = entry[len("pkg://"):].strip("/").replace("/", ".")
            base = Path(str(resources.files(package)))
            dirs.append((package.split(".")[0], base / "experiment"))
        elif entry.startswith("file://"):
            dirs.append((entry, Path(entry[len("file://"):]) / "experiment"))
    return [(where, d) for where, d in dirs if d.is_dir()]


def experiment_page() -> str:
    """``options/experiment.md``: the presets, with what their YAML says about itself."""
    lines = ["# `experiment`", "",
             "Presets that set several groups at once: `python train.py experiment=<preset>`; anything "
             "given after it on the command line still overrides it. Generated from the YAML files on "
             "Hydra's search path (corral's own and every installed plugin's) when the site is built.", "",
             "| preset | from | what it is |", "|---|---|---|"]
    sections = []
    for where, directory in experiment_dirs():
        for path in sorted(directory.glob("*.yaml")):
            text = path.read_text()
            comments = [ln[1:].strip() for ln in text.splitlines()
                        if ln.startswith("#") and not ln.startswith("# @package")]
            about = next((c for c in comments if c and not c.startswith("python ")), "")
            lines.append(f"| [`{path.stem}`](#experiment-{path.stem}) | {cell(where)} | {cell(about)} |")
            sections += ["", f"## `experiment={path.stem}` {{#experiment-{path.stem}}}", "",
                         f"From **{where}**.", "", "```yaml", text.rstrip(), "```"]
    return "\n".join(lines + sections) + "\n"


def option_pages() -> dict[str, str]:
    """``options/*.md``: an index, one page per config group, and the experiment presets."""
    data = registry_json()
    for failed in data["failed"]:
        LOG.warning("corral plugin %s (%s %s) failed to load, its options are missing from the site: %s",
                    failed["plugin"], failed["distribution"], failed["version"], failed["error"])
    kinds: dict[str, list[dict[str, Any]]] = {}
    for component in data["components"]:
        kinds.setdefault(component["kind"], []).append(component)
    pages = {f"options/{kind}.md": group_page(kind, components) for kind, components in kinds.items()}
    pages["options/experiment.md"] = experiment_page()
    index = ["# Config groups", "",
             "Every part of a run is chosen on the command line from a config group: "
             "`python train.py algo=sac env=pendulum policy=tanh_gaussian`. One page per group lists every "
             "option installed when this site was built, each with its fields, types, defaults and help "
             "(`corral plugins` prints the same from your own environment).", "",
             "| group | options |", "|---|---|"]
    for kind, components in kinds.items():
        names = ", ".join(f"`{c['name']}`" for c in components)
        index.append(f"| [`{kind}`]({kind}.md) | {names} |")
    index.append("| [`experiment`](experiment.md) | presets that set several groups at once |")
    pages["options/index.md"] = "\n".join(index) + "\n"
    return pages


# ---------------------------------------------------------------------------------------------
# nav
def nav_pages(nav: Any) -> Iterator[str]:
    """Every page path a nav (from mkdocs.yml) lists."""
    if isinstance(nav, str):
        if not SCHEME.match(nav):
            yield nav
    elif isinstance(nav, dict):
        for value in nav.values():
            yield from nav_pages(value)
    elif isinstance(nav, list):
        for item in nav:
            yield from nav_pages(item)


def expand_options(nav: Any, groups: list[str]) -> None:
    """Replace the nav's ``Title: options/index.md`` entry, in place, with a section of ``groups``."""
    if isinstance(nav, list):
        for item in nav:
            if isinstance(item, dict):
                for title, value in item.items():
                    if value == "options/index.md":
                        item[title] = list(groups)
                    else:
                        expand_options(value, groups)


# ---------------------------------------------------------------------------------------------
# the hooks
def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the front page, the option pages and the repository files that pages link to."""
    generated = {"index.md": (ROOT / "README.md").read_text(), **option_pages()}
    for src_uri, content in generated.items():
        files.append(File.generated(config, src_uri, content=content))

    # Copies of the repository files linked from pages (and from the copied markdown, transitively).
    todo = [(f.src_uri, expand_markers(Path(f.abs_src_path).read_text())) for f in files
            if f.is_documentation_page() and f.abs_src_path]
    todo += list(generated.items())
    seen: set[str] = set()
    while todo:
        src_uri, markdown = todo.pop()
        for repo_path in links_of(src_uri, markdown):
            if repo_path.startswith("docs/") or repo_path == "README.md" or repo_path in seen:
                continue
            seen.add(repo_path)
            source = ROOT / repo_path
            if not source.is_file():
                continue  # left as it is: mkdocs --strict reports the broken link
            copy = File.generated(config, site_path_of(repo_path), abs_src_path=str(source))
            files.append(copy)
            if copy.is_documentation_page():
                todo.append((copy.src_uri, source.read_text()))

    if config.nav is not None:
        # The nav's "options/index.md" entry becomes a section with every generated group page.
        groups = ["options/index.md", *sorted(p for p in generated if p.startswith("options/") and p != "options/index.md")]
        expand_options(config.nav, groups)
        # Pages the nav does not list go at its end, so that none is orphaned.
        listed = set(nav_pages(config.nav))
        extra = sorted(f.src_uri for f in files if f.is_documentation_page() and f.src_uri not in listed
                       and not f.src_uri.startswith(("repo/", "options/")) and f.src_uri != "index.md")
        if extra:
            config.nav.append({"More": extra})
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Point links at the site's copies of repository files."""
    return rewrite_links(page.file.src_uri, expand_markers(markdown))
