"""A clone of the repository, with nothing beside it, is the whole project: no file may read
or link to a sibling checkout or to a path of the machine it was built on, and every
relative link of the docs points at a file inside the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# spelled in pieces so that this file does not match itself
FORBIDDEN = ("../" + "shared", "/work" + "/", "/root" + "/", "/home" + "/")
MARKDOWN_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def tracked_files() -> list[Path]:
    done = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return [ROOT / name for name in done.stdout.split("\0") if name]


def test_no_tracked_line_names_a_sibling_checkout_or_a_build_machine_path():
    offenders = []
    for path in tracked_files():
        if not path.is_file():
            continue  # deleted in the work tree, not yet committed
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if any(bad in line for bad in FORBIDDEN):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []


def test_relative_links_in_the_docs_point_inside_the_repository():
    broken = []
    for doc in [p for p in tracked_files() if p.suffix == ".md" and p.is_file()]:
        for target in MARKDOWN_LINK.findall(doc.read_text()):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue  # a web address or an anchor on the same page
            resolved = (doc.parent / target.split("#", 1)[0]).resolve()
            if not resolved.is_relative_to(ROOT) or not resolved.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert broken == []
