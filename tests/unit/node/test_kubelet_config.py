"""KubeletConfiguration edits: byte-exact preservation, reading, validation, errors."""

from __future__ import annotations

import pytest

from abtest.config.domain import Scalar
from abtest.errors import ConfigError, UserError
from abtest.node.kubelet_config import (
    apply_settings,
    changed_fields,
    check_value,
    diff,
    feature_gates,
    parse_config,
    parse_set_option,
    read_setting,
    split_path,
)

SAMPLE = """\
# Kubelet configuration for worker-1. Managed by kubeadm; abtest edits single values only.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: 0s
    cacheUnauthorizedTTL: 0s
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
evictionHard:
  memory.available: "100Mi"
  nodefs.available: 10%
featureGates:
  # AGC gates (vendor kubelet build only)
  KubeletQOSCgroupUpdateCoalescing: false
  PLEGOnDemandRelist: false   # backported from 1.36
  InPlacePodVerticalScaling: true

kubeAPIBurst: 100
kubeAPIQPS: 50
logging:
  flushFrequency: 0
  format: text
  verbosity: 0
maxPods: 250
rotateCertificates: true
serializeImagePulls: false
staticPodPath: /etc/kubernetes/manifests
# end of file comment
"""


def changed_lines(old: str, new: str) -> list[tuple[str, str]]:
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    assert len(a) == len(b)
    return [(x, y) for x, y in zip(a, b, strict=True) if x != y]


def inserted_lines(old: str, new: str) -> list[str]:
    """The lines added to ``old`` to make ``new``; fails unless ``new`` only adds lines."""
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    out, i = [], 0
    for line in b:
        if i < len(a) and line == a[i]:
            i += 1
        else:
            out.append(line)
    assert i == len(a), "some original line was changed or reordered"
    return out


# --------------------------------------------------------------------------- byte-exactness


def test_no_settings_returns_text_unchanged() -> None:
    assert apply_settings(SAMPLE, {}) == SAMPLE
    odd = "kind: KubeletConfiguration   \r\n\r\n# x\t\r\nfoo:    'bar'\r\n..."
    assert apply_settings(odd, {}) == odd


def test_toggle_gate_changes_one_line_and_keeps_its_comment() -> None:
    new = apply_settings(SAMPLE, {"featureGates.PLEGOnDemandRelist": True})
    assert changed_lines(SAMPLE, new) == [
        (
            "  PLEGOnDemandRelist: false   # backported from 1.36\n",
            "  PLEGOnDemandRelist: true   # backported from 1.36\n",
        )
    ]
    assert read_setting(new, "featureGates.PLEGOnDemandRelist") is True


ORIGINAL: dict[str, Scalar] = {
    "featureGates.KubeletQOSCgroupUpdateCoalescing": False,
    "featureGates.PLEGOnDemandRelist": False,
    "featureGates.InPlacePodVerticalScaling": True,
    "kubeAPIQPS": 50,
    "evictionHard.memory.available": "100Mi",
    "evictionHard.nodefs.available": "10%",
    "authentication.webhook.cacheTTL": "0s",
    "cgroupDriver": "systemd",
    "logging.verbosity": 0,
}
CHANGED: dict[str, Scalar] = {
    "featureGates.KubeletQOSCgroupUpdateCoalescing": True,
    "featureGates.PLEGOnDemandRelist": True,
    "featureGates.InPlacePodVerticalScaling": False,
    "kubeAPIQPS": 5,
    "evictionHard.memory.available": "200Mi",
    "evictionHard.nodefs.available": "5%",
    "authentication.webhook.cacheTTL": "2m0s",
    "cgroupDriver": "cgroupfs",
    "logging.verbosity": 4,
}


def test_apply_then_restore_is_byte_identical() -> None:
    assert {p: read_setting(SAMPLE, p) for p in ORIGINAL} == ORIGINAL
    new = apply_settings(SAMPLE, CHANGED)
    assert len(changed_lines(SAMPLE, new)) == len(CHANGED)  # exactly those lines
    assert {p: read_setting(new, p) for p in CHANGED} == CHANGED
    assert '  memory.available: "200Mi"\n' in new  # quoting style kept
    back = apply_settings(new, ORIGINAL)
    assert back == SAMPLE


def test_every_other_value_is_untouched() -> None:
    new = apply_settings(SAMPLE, {"kubeAPIQPS": 7.5})
    old_data, new_data = parse_config(SAMPLE), parse_config(new)
    assert new_data.pop("kubeAPIQPS") == 7.5
    old_data.pop("kubeAPIQPS")
    assert new_data == old_data
    assert list(parse_config(new)) == list(parse_config(SAMPLE))  # key order too


def test_applying_current_values_is_a_no_op() -> None:
    assert apply_settings(SAMPLE, ORIGINAL) == SAMPLE


def test_new_gate_is_inserted_after_the_last_gate() -> None:
    new = apply_settings(SAMPLE, {"featureGates.KubeletPodStatusRetry": True})
    assert inserted_lines(SAMPLE, new) == ["  KubeletPodStatusRetry: true\n"]
    lines = new.splitlines()
    at = lines.index("  KubeletPodStatusRetry: true")
    assert lines[at - 1] == "  InPlacePodVerticalScaling: true"
    assert feature_gates(new)["KubeletPodStatusRetry"] is True


def test_new_nested_and_top_level_fields() -> None:
    new = apply_settings(
        SAMPLE,
        {
            "logging.options.json.infoBufferSize": "0",
            "evictionHard.imagefs.available": "15%",
            "containerLogMaxSize": "10Mi",
            "podPidsLimit": -1,
        },
    )
    assert inserted_lines(SAMPLE, new) == [
        "  imagefs.available: 15%\n",
        "  options:\n",
        "    json:\n",
        '      infoBufferSize: "0"\n',  # quoted: it must stay a string
        "containerLogMaxSize: 10Mi\n",
        "podPidsLimit: -1\n",
    ]
    assert read_setting(new, "logging.options.json.infoBufferSize") == "0"
    assert read_setting(new, "podPidsLimit") == -1
    assert new.endswith("podPidsLimit: -1\n# end of file comment\n")


def test_feature_gates_added_when_the_file_has_none() -> None:
    text = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 110"
    new = apply_settings(text, {"featureGates.B": True, "featureGates.A": False})
    assert new == text + "\nfeatureGates:\n  B: true\n  A: false\n"
    assert feature_gates(new) == {"B": True, "A": False}
    assert feature_gates(text) == {}


def test_flow_and_empty_maps() -> None:
    text = "kind: KubeletConfiguration\nfeatureGates: {}\nevictionHard: {memory.available: 1Gi}\n"
    new = apply_settings(text, {"featureGates.X": True, "evictionHard.pid.available": "5%"})
    assert new == (
        "kind: KubeletConfiguration\nfeatureGates: {X: true}\n"
        "evictionHard: {memory.available: 1Gi, pid.available: 5%}\n"
    )
    empty = "kind: KubeletConfiguration\nfeatureGates:\nmaxPods:\n"
    new = apply_settings(empty, {"featureGates.X": False, "maxPods": 10})
    assert new == "kind: KubeletConfiguration\nfeatureGates:\n  X: false\nmaxPods: 10\n"


def test_crlf_and_indent_of_the_file_are_kept() -> None:
    text = "kind: KubeletConfiguration\r\nfeatureGates:\r\n    A: true\r\n"
    new = apply_settings(text, {"featureGates.A": False, "featureGates.B": True})
    assert new == "kind: KubeletConfiguration\r\nfeatureGates:\r\n    A: false\r\n    B: true\r\n"
    assert apply_settings(new, {"featureGates.A": True}).startswith(text)


def test_value_rendering_keeps_types() -> None:
    cases: dict[str, Scalar] = {
        "a": "true",
        "b": "yes",
        "c": "123",
        "d": "1e3",
        "e": "",
        "f": "it's # not a comment",
        "g": 1e20,
        "h": 0.1,
        "i": "null",
        "j": "0x1F",
        "k": "naïve",
        "l": "unix:///run/containerd/containerd.sock",
        "m": "1:20",
        "n": "2001-12-14",
        "o": "a:",
        "p": "x, y",
        "q": "[x]",
        "r": "@x",
        "s": "-1",
        "t": "~",
    }
    new = apply_settings("kind: KubeletConfiguration\n", cases)
    assert "l: unix:///run/containerd/containerd.sock\n" in new  # plain where safe
    for path, value in cases.items():
        got = read_setting(new, path)
        assert got == value and type(got) is type(value), (path, got)
    # the same values inside a flow map, where "," and brackets matter
    flow = apply_settings(
        "kind: KubeletConfiguration\nx: {}\n", {f"x.{k}": v for k, v in cases.items()}
    )
    assert flow.startswith("kind: KubeletConfiguration\nx: {a: ")
    for path, value in cases.items():
        got = read_setting(flow, f"x.{path}")
        assert got == value and type(got) is type(value), (path, got)


def test_single_quoted_value_stays_single_quoted() -> None:
    text = "kind: KubeletConfiguration\nresolvConf: '/etc/resolv.conf'\n"
    new = apply_settings(text, {"resolvConf": "/run/it's.conf"})
    assert new == "kind: KubeletConfiguration\nresolvConf: '/run/it''s.conf'\n"
    assert read_setting(new, "resolvConf") == "/run/it's.conf"


def test_anchored_values_are_refused_not_guessed() -> None:
    text = (
        "kind: KubeletConfiguration\n"
        "evictionHard: &ev\n  memory.available: 100Mi\n"
        "evictionSoft: *ev\n"
    )
    for path in ("evictionHard.memory.available", "evictionSoft.memory.available"):
        with pytest.raises(ConfigError, match="more than the requested values"):
            apply_settings(text, {path: "1Gi"})
    # away from the anchor, edits are fine
    new = apply_settings(text, {"maxPods": 10})
    assert new == text + "maxPods: 10\n"


def test_structural_conflicts() -> None:
    with pytest.raises(UserError, match="not a single value"):
        apply_settings(SAMPLE, {"authentication.webhook": "x"})
    with pytest.raises(UserError, match="not a single value"):
        apply_settings(SAMPLE, {"clusterDNS": "10.0.0.1"})
    with pytest.raises(UserError, match="cgroupDriver is not a map"):
        apply_settings(SAMPLE, {"cgroupDriver.x": 1})
    with pytest.raises(UserError, match="multi-line"):
        apply_settings("kind: KubeletConfiguration\nx: |\n  a\n  b\n", {"x": "c"})


# --------------------------------------------------------------------------- reading


def test_read_setting() -> None:
    assert read_setting(SAMPLE, "featureGates.InPlacePodVerticalScaling") is True
    assert read_setting(SAMPLE, "featureGates.Unknown") is None
    assert read_setting(SAMPLE, "evictionHard.memory.available") == "100Mi"
    assert read_setting(SAMPLE, "authentication.x509.clientCAFile") == "/etc/kubernetes/pki/ca.crt"
    assert read_setting(SAMPLE, "kubeAPIQPS") == 50
    assert read_setting(SAMPLE, "cgroupDriver.nope") is None
    with pytest.raises(UserError, match="not a single value"):
        read_setting(SAMPLE, "authentication")
    with pytest.raises(UserError, match="not a single value"):
        read_setting(SAMPLE, "clusterDNS")


def test_feature_gates_map() -> None:
    assert feature_gates(SAMPLE) == {
        "KubeletQOSCgroupUpdateCoalescing": False,
        "PLEGOnDemandRelist": False,
        "InPlacePodVerticalScaling": True,
    }
    with pytest.raises(ConfigError, match="featureGates"):
        feature_gates("kind: KubeletConfiguration\nfeatureGates: {A: 1}\n")


def test_diff() -> None:
    assert diff(SAMPLE, SAMPLE, "config.yaml") == ""
    new = apply_settings(SAMPLE, {"kubeAPIQPS": 5})
    d = diff(SAMPLE, new, "/var/lib/kubelet/config.yaml")
    assert d.startswith("--- a//var/lib/kubelet/config.yaml\n+++ b//var/lib/kubelet/config.yaml\n")
    assert [ln for ln in d.splitlines() if ln[:1] in "+-" and ln[:3] not in ("---", "+++")] == [
        "-kubeAPIQPS: 50",
        "+kubeAPIQPS: 5",
    ]
    assert diff("a", "b", "f").endswith("+b\n")  # no newline at EOF still yields whole lines


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("path", "match"),
    [
        ("", "empty"),
        ("featureGates.", "invalid feature gate name"),
        ("featureGates.Bad-Name", "invalid feature gate name"),
        ("featureGates.A.B", "invalid feature gate name"),
        ("featureGates.A;rm -rf /", "invalid feature gate name"),
        ("9lives", "invalid field path segment"),
        ("kube_api_qps", "invalid field path segment"),
        ("logging..format", "invalid field path segment"),
        ("logging.format ", "invalid field path segment"),
        ("evictionHard.", "invalid evictionHard key"),
        ("evictionHard.memory available", "invalid evictionHard key"),
        ("kind", "cannot be changed"),
        ("apiVersion", "cannot be changed"),
    ],
)
def test_invalid_paths(path: str, match: str) -> None:
    with pytest.raises(UserError, match=match) as err:
        apply_settings(SAMPLE, {path: True})
    assert err.value.todo


def test_valid_paths() -> None:
    assert split_path("featureGates.X1") == ("featureGates", "X1")
    assert split_path("evictionHard.memory.available") == ("evictionHard", "memory.available")
    assert split_path("systemReserved.ephemeral-storage") == ("systemReserved", "ephemeral-storage")
    assert split_path("logging.options.json.infoBufferSize") == (
        "logging",
        "options",
        "json",
        "infoBufferSize",
    )


@pytest.mark.parametrize(
    ("path", "value", "match"),
    [
        ("featureGates.X", "true", "true or false"),
        ("featureGates.X", 1, "true or false"),
        ("maxPods", float("nan"), "finite"),
        ("maxPods", float("inf"), "finite"),
        ("staticPodPath", "/a\nb", "newline or control"),
        ("staticPodPath", "/a\x07", "newline or control"),
        ("staticPodPath", "/a\u2028", "newline or control"),
        ("clusterDNS", ["10.0.0.1"], "type list"),
        ("maxPods", None, "type NoneType"),
    ],
)
def test_invalid_values(path: str, value: object, match: str) -> None:
    with pytest.raises(UserError, match=match) as err:
        apply_settings(SAMPLE, {path: value})  # type: ignore[dict-item]
    assert err.value.where == path
    with pytest.raises(UserError):
        check_value(path, value)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("- a\n- b\n", "expected a mapping"),
        ("", "expected a mapping"),
        ("apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n", "kind"),
        ("maxPods: 10\n", "kind is None"),
        ("kind: KubeletConfiguration\nmaxPods: [1\n", "not valid YAML"),
        ("kind: KubeletConfiguration\nmaxPods: 1\nmaxPods: 2\n", "not valid YAML"),
        ("kind: KubeletConfiguration\n---\nkind: KubeletConfiguration\n", "not valid YAML"),
    ],
)
def test_refuses_what_is_not_a_kubelet_configuration(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as err:
        apply_settings(text, {"maxPods": 1})
    assert err.value.where == "kubelet config"
    with pytest.raises(ConfigError):
        apply_settings(text, {})
    with pytest.raises(ConfigError):
        read_setting(text, "maxPods")


# --------------------------------------------------------------------------- --set


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ("featureGates.X=true", ("featureGates.X", True)),
        ("featureGates.X=False", ("featureGates.X", False)),
        ("kubeAPIQPS=5", ("kubeAPIQPS", 5)),
        ("podPidsLimit=-1", ("podPidsLimit", -1)),
        ("cpuCFSQuotaPeriod=100ms", ("cpuCFSQuotaPeriod", "100ms")),
        ("imageGCHighThresholdPercent=85.5", ("imageGCHighThresholdPercent", 85.5)),
        ("x=1e3", ("x", 1000.0)),
        ("x='5'", ("x", "5")),
        ('x=""', ("x", "")),
        ("evictionHard.memory.available=100Mi", ("evictionHard.memory.available", "100Mi")),
        ("resolvConf=/etc/a=b", ("resolvConf", "/etc/a=b")),
        (" maxPods = 10 ", ("maxPods", 10)),
    ],
)
def test_parse_set_option(option: str, expected: tuple[str, object]) -> None:
    got = parse_set_option(option)
    assert got == expected and type(got[1]) is type(expected[1])


@pytest.mark.parametrize(
    ("option", "match"),
    [
        ("featureGates.X", "no PATH=VALUE"),
        ("=true", "no PATH=VALUE"),
        ("maxPods=", "empty value"),
        ("featureGates.X=yes", "true or false"),
        ("featureGates.X=1", "true or false"),
        ("featureGates.X-Y=true", "invalid feature gate name"),
        ("kind=Pod", "cannot be changed"),
    ],
)
def test_parse_set_option_errors(option: str, match: str) -> None:
    with pytest.raises(UserError, match=match):
        parse_set_option(option)


def _leaves(data: dict[str, object], prefix: str = "") -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
    for key, value in data.items():
        path = prefix + key
        if isinstance(value, dict):
            out.extend(_leaves(value, path + "."))
        elif not isinstance(value, list):
            out.append((path, value))
    return out


def _other(value: object) -> Scalar:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    return f"{value}x"


def test_every_value_in_the_sample_round_trips_byte_for_byte() -> None:
    leaves = [(p, v) for p, v in _leaves(parse_config(SAMPLE)) if p not in ("kind", "apiVersion")]
    assert len(leaves) > 20
    for path, value in leaves:
        assert isinstance(value, bool | int | float | str)
        new = apply_settings(SAMPLE, {path: _other(value)})
        assert len(changed_lines(SAMPLE, new)) == 1, path
        assert read_setting(new, path) == _other(value)
        assert apply_settings(new, {path: value}) == SAMPLE, path


def test_a_new_key_in_every_map_of_the_sample_adds_one_line() -> None:
    maps = {p.rsplit(".", 1)[0] for p, _ in _leaves(parse_config(SAMPLE)) if "." in p}
    maps -= {"evictionHard.memory", "evictionHard.nodefs"}  # "memory.available" is one key
    for parent in [*sorted(maps | {"evictionHard"}), ""]:
        path = f"{parent}.zzNew" if parent else "zzNew"
        if parent == "featureGates":
            path = "featureGates.ZzNew"
        new = apply_settings(SAMPLE, {path: True})
        assert len(inserted_lines(SAMPLE, new)) == 1, path
        assert read_setting(new, path) is True


def test_changed_fields_lists_each_setting_that_differs_by_its_dotted_path() -> None:
    old = SAMPLE
    new = apply_settings(SAMPLE, {"kubeAPIQPS": 5, "featureGates.NewGate": True})
    assert changed_fields(old, new) == {
        "featureGates.NewGate": [None, True],
        "kubeAPIQPS": [50, 5],
    }
    assert changed_fields(old, old) == {}
