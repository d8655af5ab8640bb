# -*- coding: utf-8 -*-
# Copyright (c) gpuserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Model snapshots from a Hugging Face Hub or a mirror: HTTP (``transport``), files checked, received and
verified (``files``), the sources (``sources``) and the staged snapshot (``snapshot``).

The package's public surface: import from here (``from ..hub import X``), not from its files."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .transport import http_get, keeps_authorization
from .files import (HubError, MANIFEST, PROGRESS, Progress, check_relpath, is_commit, read_manifest, receive,
                    repo_id_problem, revision_problem, selected, unique_listing)
from .sources import Hub, LibraryHub, LocalSource, RsyncSource, Source
from .snapshot import NotYet, read_token, repair_owner, snapshot, transient, with_retries
from .manager import ARGUMENT_SPEC, MUTUALLY_EXCLUSIVE, REQUIRED_IF, SnapshotFailed, SnapshotManager

__all__ = (
    "ARGUMENT_SPEC", "Hub", "HubError", "LibraryHub", "LocalSource", "MANIFEST", "MUTUALLY_EXCLUSIVE", "NotYet",
    "PROGRESS", "Progress", "REQUIRED_IF", "RsyncSource", "SnapshotFailed", "SnapshotManager", "Source",
    "check_relpath", "http_get", "is_commit", "keeps_authorization", "read_manifest", "read_token", "receive",
    "repair_owner", "repo_id_problem", "revision_problem", "selected", "snapshot", "transient", "unique_listing",
    "with_retries",
)
