"""The pod spec's top-level fields and their API types, as a data table: what a ``pod_field``
factor may name, and what its value must be. Taken from the kubernetes client's ``V1PodSpec``
(``attribute_map`` / ``openapi_types``); the config layer may not import the client (only
``abtest.cluster`` does), so the table is shipped here and a unit test checks it against the
installed client.
"""

from __future__ import annotations

#: field (as YAML/JSON spells it) -> its OpenAPI type in the client's notation
POD_SPEC_FIELDS: dict[str, str] = {
    "activeDeadlineSeconds": "int",
    "affinity": "V1Affinity",
    "automountServiceAccountToken": "bool",
    "containers": "list[V1Container]",
    "dnsConfig": "V1PodDNSConfig",
    "dnsPolicy": "str",
    "enableServiceLinks": "bool",
    "ephemeralContainers": "list[V1EphemeralContainer]",
    "hostAliases": "list[V1HostAlias]",
    "hostIPC": "bool",
    "hostNetwork": "bool",
    "hostPID": "bool",
    "hostUsers": "bool",
    "hostname": "str",
    "hostnameOverride": "str",
    "imagePullSecrets": "list[V1LocalObjectReference]",
    "initContainers": "list[V1Container]",
    "nodeName": "str",
    "nodeSelector": "dict[str, str]",
    "os": "V1PodOS",
    "overhead": "dict[str, str]",
    "preemptionPolicy": "str",
    "priority": "int",
    "priorityClassName": "str",
    "readinessGates": "list[V1PodReadinessGate]",
    "resourceClaims": "list[V1PodResourceClaim]",
    "resources": "V1ResourceRequirements",
    "restartPolicy": "str",
    "runtimeClassName": "str",
    "schedulerName": "str",
    "schedulingGates": "list[V1PodSchedulingGate]",
    "schedulingGroup": "V1PodSchedulingGroup",
    "securityContext": "V1PodSecurityContext",
    "serviceAccount": "str",
    "serviceAccountName": "str",
    "setHostnameAsFQDN": "bool",
    "shareProcessNamespace": "bool",
    "subdomain": "str",
    "terminationGracePeriodSeconds": "int",
    "tolerations": "list[V1Toleration]",
    "topologySpreadConstraints": "list[V1TopologySpreadConstraint]",
    "volumes": "list[V1Volume]",
}

#: the types a scalar level can be, and what each accepts (bool is no int here)
SCALAR_TYPES: dict[str, tuple[type, ...]] = {"bool": (bool,), "int": (int,), "str": (str,)}
