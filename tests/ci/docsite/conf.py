# Sphinx configuration of the collection's docsite build (tests/ci/docsite.sh), as `antsibull-docs sphinx-init
# --use-current gpuserve.sglang` writes it (antsibull-docs 2.28.0), with one change: Ansible's own docsite is
# reached through the inventory of the labels the pages link to (ansible-labels.txt; no documentation host is
# reachable here), and no Python or Jinja2 inventory is asked for (no page links there).
# Copyright (c) Ansible Project
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import os

project = 'gpuserve.sglang'
copyright = 'gpuserve.sglang contributors'
title = 'gpuserve.sglang Collection Documentation'
html_short_title = 'gpuserve.sglang'

extensions = ['sphinx.ext.autodoc', 'sphinx.ext.intersphinx', 'sphinx_antsibull_ext']

pygments_style = 'ansible'

highlight_language = 'YAML+Jinja'

html_theme = 'sphinx_ansible_theme'
html_show_sphinx = False

display_version = False

html_use_smartypants = True
html_use_modindex = False
html_use_index = False
html_copy_source = False

intersphinx_mapping = {
    'ansible_devel': ('https://docs.ansible.com/projects/ansible/devel/', os.environ['GPUSERVE_ANSIBLE_INVENTORY']),
}

default_role = 'any'

nitpicky = True
