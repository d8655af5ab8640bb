"""Every licence file a header, galaxy.yml or a document cites exists, with the licence's own text (#45 item 1)."""
import os
import re
import subprocess

import yaml

from unit_helpers import ROOT

CITED = re.compile(r"LICENSES/([A-Za-z0-9.+-]+\.txt)")


def tracked_files():
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [f for f in out.splitlines() if os.path.isfile(os.path.join(ROOT, f))]


def test_every_cited_licence_file_exists():
    cited = {}
    for name in tracked_files():
        if name.startswith("LICENSES/"):
            continue
        with open(os.path.join(ROOT, name), "rb") as fh:
            text = fh.read().decode("utf-8", "replace")
        for lic in CITED.findall(text):
            cited.setdefault(lic, name)
    assert cited, "no file cites a licence"
    missing = {lic: where for lic, where in cited.items() if not os.path.isfile(os.path.join(ROOT, "LICENSES", lic))}
    assert not missing, "cited but missing (licence: first file citing it): %s" % missing


def test_galaxys_licence_has_its_text():
    with open(os.path.join(ROOT, "galaxy.yml")) as fh:
        galaxy = yaml.safe_load(fh)
    for spdx in galaxy["license"]:
        with open(os.path.join(ROOT, "LICENSES", spdx + ".txt")) as fh:
            text = fh.read()
        if spdx.startswith("GPL-3.0"):
            assert "GNU GENERAL PUBLIC LICENSE" in text and "Version 3, 29 June 2007" in text
            assert "END OF TERMS AND CONDITIONS" in text
