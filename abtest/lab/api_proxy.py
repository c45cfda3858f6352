"""The kubelets' way to the API server: Shopify's toxiproxy (binaries.TOXIPROXY), so that
`lab up --api-latency MS[:JITTER]` can put a control plane "at a distance" on that path
alone. The generator, the watcher and the control plane's own clients keep their direct
path (the admin, scheduler and controller-manager kubeconfigs name the API server itself).

Every lab kubelet goes through the proxy, at 0 ms too (the toxic is then removed and the
proxy only copies bytes): a change of the setting is then one call to the proxy's HTTP API,
never a kubelet restart. Both the proxy's listener and its admin API are on 127.0.0.1,
which the API server's serving certificate names (control_plane.prepare), so the kubelet's
TLS goes through untouched and verifies as before.

The delay is on the downstream (API server -> kubelet) stream only: each response reaches
the kubelet MS later, so a request's round trip grows by MS, as the setting says. A toxic
on both streams would add MS twice per round trip.

`--api-faults KIB` is a `limit_data` toxic on the upstream (kubelet -> API server) stream of
every connection: after KIB KiB of requests the proxy closes it, and what was in flight on
it (client-go multiplexes all of a client's requests on one HTTP/2 connection) fails.
client-go retries a GET after a lost connection but never a write, so status PATCHes fail
and reach the status manager, which is what the status-retry gate acts on; a cut falls most
often inside a request with a body (a PATCH or an event POST), since those carry the bytes.
Per request, not per connection: the kubelet keeps its connection, so toxiproxy's toxicity
(a dice roll per connection) would fail all of them or none. API Priority and Fairness 429s
would not do either: client-go retries a 429 after its Retry-After, writes included (their
body is a byte slice), so the status manager would see a slow write, not a failed one."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from abtest.config.api_faults import ApiFaults
from abtest.config.api_latency import ApiLatency
from abtest.lab.binaries import TOXIPROXY
from abtest.lab.files import PUBLIC_FILE, write_file
from abtest.lab.layout import LabState, Node, Paths, Say, node_index

#: the proxy's name in toxiproxy, and the latency toxic's
PROXY = "kube-apiserver"
TOXIC = "api-latency"
FAULTS_TOXIC = "api-faults"
#: Toxiproxy logs every client connection at info; the lab's log keeps warnings only.
ENV = {"LOG_LEVEL": "warn"}


def config_file(paths: Paths) -> Path:
    return paths.root / "api-proxy.json"


def config_text(ports: dict[str, int]) -> str:
    """Toxiproxy's -config: the one proxy, created at start, so the proxy listens before any
    kubelet starts (the toxic is set afterwards, from the lab's state)."""
    proxy = {
        "name": PROXY,
        "listen": f"127.0.0.1:{ports['api_proxy']}",
        "upstream": f"127.0.0.1:{ports['apiserver']}",
        "enabled": True,
    }
    return json.dumps([proxy], indent=2) + "\n"


def write_config(paths: Paths, ports: dict[str, int]) -> None:
    write_file(config_file(paths), config_text(ports), PUBLIC_FILE)


def argv(paths: Paths, ports: dict[str, int]) -> tuple[str, ...]:
    return (
        str(paths.bin / TOXIPROXY),
        "-host=127.0.0.1",
        f"-port={ports['api_proxy_admin']}",
        f"-config={config_file(paths)}",
    )


def kubelet_server(ports: dict[str, int]) -> str:
    """The API server address every lab kubelet's kubeconfig names: the proxy's listener."""
    return f"https://127.0.0.1:{ports['api_proxy']}"


def _call(ports: dict[str, int], path: str, method: str = "GET", body: Any = None) -> Any:
    url = f"http://127.0.0.1:{ports['api_proxy_admin']}{path}"
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    with urllib.request.urlopen(req, timeout=5) as resp:
        raw = resp.read()
    return json.loads(raw) if raw.strip() else None


def serving(ports: dict[str, int]) -> bool:
    """The admin API answers and the kubelets' proxy is there and enabled."""
    return bool(_call(ports, f"/proxies/{PROXY}").get("enabled"))


def _remove(ports: dict[str, int], name: str) -> None:
    try:
        _call(ports, f"/proxies/{PROXY}/toxics/{name}", "DELETE")
    except urllib.error.HTTPError as exc:
        if exc.code != 404:
            raise


def set_latency(ports: dict[str, int], latency: ApiLatency) -> None:
    """Make the proxy's latency toxic `latency` (none at all at 0). The toxic is replaced,
    not updated: one path whether or not it was there."""
    _remove(ports, TOXIC)
    if latency.off:
        return
    toxic = {
        "name": TOXIC,
        "type": "latency",
        "stream": "downstream",
        "toxicity": 1.0,
        "attributes": {"latency": latency.ms, "jitter": latency.jitter_ms},
    }
    _call(ports, f"/proxies/{PROXY}/toxics", "POST", toxic)


def current_latency(ports: dict[str, int]) -> ApiLatency:
    """What the running proxy applies (0 when it has no latency toxic)."""
    for toxic in _call(ports, f"/proxies/{PROXY}/toxics") or []:
        if toxic.get("name") == TOXIC:
            attrs = toxic.get("attributes", {})
            return ApiLatency(int(attrs.get("latency", 0)), int(attrs.get("jitter", 0)))
    return ApiLatency()


def set_faults(ports: dict[str, int], faults: ApiFaults) -> None:
    """Make the proxy's connection-cutting toxic `faults` (none at all at 0), replaced as
    the latency's is. Toxicity 1: every connection, the one the kubelet keeps included."""
    _remove(ports, FAULTS_TOXIC)
    if faults.off:
        return
    toxic = {
        "name": FAULTS_TOXIC,
        "type": "limit_data",
        "stream": "upstream",
        "toxicity": 1.0,
        "attributes": {"bytes": faults.kib * 1024},
    }
    _call(ports, f"/proxies/{PROXY}/toxics", "POST", toxic)


def current_faults(ports: dict[str, int]) -> ApiFaults:
    """What the running proxy applies (0 when it has no fault toxic)."""
    for toxic in _call(ports, f"/proxies/{PROXY}/toxics") or []:
        if toxic.get("name") == FAULTS_TOXIC:
            return ApiFaults(int(toxic.get("attributes", {}).get("bytes", 0)) // 1024)
    return ApiFaults()


def stored(paths: Paths) -> ApiLatency:
    """The setting in the lab's state (what the proxy is given whenever it starts)."""
    state = LabState.load(paths)
    return ApiLatency(state.api_latency_ms, state.api_jitter_ms) if state else ApiLatency()


def stored_faults(paths: Paths) -> ApiFaults:
    state = LabState.load(paths)
    return ApiFaults(state.api_faults_kib) if state else ApiFaults()


def record(paths: Paths, latency: ApiLatency | None, faults: ApiFaults | None = None) -> None:
    """Keep the settings given (None: keep the state's) in the lab's state."""
    state = LabState.load(paths) or LabState()
    if latency is not None:
        state.api_latency_ms, state.api_jitter_ms = latency.ms, latency.jitter_ms
    if faults is not None:
        state.api_faults_kib = faults.kib
    state.save(paths)


def apply_stored(paths: Paths, ports: dict[str, int], say: Say) -> None:
    """Give the running proxy the state's settings (after its start, or after a change)."""
    latency, faults = stored(paths), stored_faults(paths)
    set_latency(ports, latency)
    set_faults(ports, faults)
    say(f"  kubelets' API latency: {latency} (through {kubelet_server(ports)})")
    if not faults.off:
        say(f"  kubelets' API faults: {faults}")


def run_env(kubeconfig: str | None, node_name: str, paths: Paths | None = None) -> dict[str, Any]:
    """What a run's environment records about this path: ``{"api_latency": {...}}`` with the
    delay the running proxy applies (not the state's, in case the two ever differ), and
    ``"api_faults"`` when it cuts connections, when the run reaches the lab (its profile
    names the lab's admin kubeconfig) and `node_name` is a lab node whose kubelet goes
    through the proxy; {} otherwise (another cluster, the systemd node, a lab from before the
    proxy, whose kubelets name the API server itself, or a lab state this user cannot read)."""
    paths = paths or Paths()
    index = node_index(node_name)
    files = (kubeconfig or "").split(":")  # KUBECONFIG's form: several files
    if index is None or not any(_same_file(f, paths.kubeconfig) for f in files if f):
        return {}
    try:
        state = LabState.load(paths)
        named = Node(index, paths).kubelet_kubeconfig.read_text()
    except (OSError, ValueError, TypeError):  # unreadable, or not a state this version reads
        return {}
    if state is None or "api_proxy_admin" not in state.ports:
        return {}
    server = kubelet_server(state.ports)
    if f"server: {server}\n" not in named:
        return {}
    try:
        latency, faults = current_latency(state.ports), current_faults(state.ports)
    except (OSError, ValueError) as exc:  # urllib's errors are OSErrors
        # the kubelet's path goes through a proxy that does not answer: say so in the record
        return {"api_latency": {"through": server, "error": str(exc)}}
    found = {"ms": latency.ms, "jitter_ms": latency.jitter_ms, "through": server}
    # only when set: a run without faults records what it did before they existed
    return {"api_latency": found} | (
        {"api_faults": {"cut_after_kib": faults.kib}} if faults.kib else {}
    )


def _same_file(a: str, b: Path) -> bool:
    try:
        return Path(a).expanduser().resolve() == b.resolve()
    except OSError:
        return False
