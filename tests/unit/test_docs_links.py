"""#62 item 6: every relative link of the Markdown pages (README, docs/, the roles' READMEs) reaches a file of the
repository - three in docs/ pointed at docs/docs/... and were dead on the docsite and on GitHub."""
import glob
import os
import re

from unit_helpers import ROOT

LINK = re.compile(r"\]\(([^)#\s]+)(#[^)]*)?\)")


def pages():
    return sorted([os.path.join(ROOT, "README.md")] + glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)
                  + glob.glob(os.path.join(ROOT, "roles", "*", "README.md")))


def test_every_relative_link_reaches_a_file():
    dead, seen = [], 0
    for page in pages():
        with open(page) as fh:
            text = fh.read()
        for m in LINK.finditer(text):
            target = m.group(1)
            if "://" in target or target.startswith("mailto:"):
                continue
            seen += 1
            if not os.path.exists(os.path.normpath(os.path.join(os.path.dirname(page), target))):
                dead.append("%s: %s" % (os.path.relpath(page, ROOT), target))
    assert seen > 20 and not dead, dead
