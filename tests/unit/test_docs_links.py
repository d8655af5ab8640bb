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


def test_every_runbook_page_is_in_the_docsite_under_its_own_label():
    """#62 item 1: the runbooks are the docsite's extra docs (docs/docsite/rst, listed in docs/docsite/extra-docs.yml);
    a page left out of the list, or listed but gone, would be missing from the docsite or break its build, and a
    page's label (what :ref: and the docsite's links reach) is its file's name."""
    import yaml
    rst = os.path.join(ROOT, "docs", "docsite", "rst")
    pages = sorted(f[:-4] for f in os.listdir(rst) if f.endswith(".rst"))
    with open(os.path.join(ROOT, "docs", "docsite", "extra-docs.yml")) as fh:
        listed = [ref for section in yaml.safe_load(fh)["sections"] for ref in section["toctree"]]
    assert len(pages) >= 8 and sorted(listed) == pages, (listed, pages)
    for page in pages:
        with open(os.path.join(rst, page + ".rst")) as fh:
            first = fh.readline().strip()
        assert first == ".. _ansible_collections.gpuserve.sglang.docsite.%s:" % page, (page, first)
