"""Kubernetes names that a catalog and a playbook both write into pods: one rule each, so a
playbook's ``workload.runtime_class`` and annotation keys are checked as a catalog's are."""

from __future__ import annotations

import re

from abtest.config.full_match import whole

# A RuntimeClass name is a DNS-1123 subdomain; an annotation key is a qualified name: an
# optional DNS-1123 subdomain prefix and "/", then a name of at most 63 characters.
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
QUALIFIED_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
RUNTIME_CLASS_TODO = "a DNS-1123 subdomain: lowercase letters, digits, - and ., e.g. runc"
ANNOTATION_TODO = "e.g. agc.cloud.tencent.com/cube-template-mode"


def runtime_class_problem(value: object) -> str | None:
    if not isinstance(value, str) or len(value) > 253 or not whole(DNS1123_SUBDOMAIN, value):
        return f"invalid RuntimeClass name {_shown(value)}"
    return None


def annotation_key_problem(key: str) -> str | None:
    prefix, slash, name = key.rpartition("/")
    problem = None
    if not name or len(name) > 63 or not whole(QUALIFIED_NAME, name):
        problem = "the name part must be 1-63 characters, alphanumeric at both ends, - _ . inside"
    elif slash and (not prefix or len(prefix) > 253 or not whole(DNS1123_SUBDOMAIN, prefix)):
        problem = "the prefix before / must be a lowercase DNS subdomain"
    return f"invalid annotation key {_shown(key)}: {problem}" if problem else None


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def namespace_problem(value: str) -> str | None:
    """A namespace is a DNS-1123 label: the playbook's field and --namespace share this rule."""
    if len(value) > 63 or not whole(NAMESPACE, value):
        return f"invalid namespace {_shown(value)}: a DNS-1123 label (a-z, 0-9, -; at most 63)"
    return None


NODE_NAME_TODO = "the node's name as `kubectl get nodes` shows it"


def node_name_problem(value: object) -> str | None:
    """A Node's name is a DNS-1123 subdomain: it reaches file names, pod specs and messages,
    so ``;$(...)``, ``../`` or a line break is refused here."""
    if not isinstance(value, str) or len(value) > 253 or not whole(DNS1123_SUBDOMAIN, value):
        return f"invalid node name {_shown(value)}: a DNS-1123 subdomain (a-z, 0-9, - and .)"
    return None


# an image reference: registry/name:tag@digest, no spaces, quotes or shell characters
IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,511}")


def image_problem(value: object) -> str | None:
    if not isinstance(value, str) or not value:
        return "the workload image is empty"
    if not whole(IMAGE, value):
        return f"invalid image reference {_shown(value)}: letters, digits and . _ / : @ + -"
    return None


NODE_PATH_TODO = "an absolute path on the node, without . or .. segments"


def node_path_problem(value: str) -> str | None:
    """A path on the node a profile names (config, binary, lock): absolute, every segment
    plain (``/etc/../tmp/x`` would write elsewhere than it says), no control character."""
    if not value.startswith("/"):
        return f"expected an absolute path on the node, got {_shown(value)}"
    if any(ch in value for ch in "\x00\n\r"):
        return f"path {_shown(value)} contains a NUL or line break"
    if any(seg in (".", "..") for seg in value.split("/")):
        return f"path {_shown(value)} has a . or .. segment"
    return None


# a run id: ours are 20261202-034717-3eab10; imported and ingested ones are kept if plain (they
# name output folders and label values, so no "/", no leading "." or "-", no control character)
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def run_id_problem(value: object) -> str | None:
    if not whole(RUN_ID, value):
        return f"invalid run id {_shown(value)}: letters, digits, . _ - (see `abtest runs`)"
    return None
