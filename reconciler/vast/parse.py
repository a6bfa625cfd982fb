"""vast's JSON rows into `reconciler.model.observed` dataclasses.

The parser is strict about what carries meaning and tolerant of what vast leaves out:

- a body without the key that holds the answer (`offers`, `instances`, `new_contract`) is a
  protocol error, never an empty answer: "no instances" must be something vast said;
- a row without an `id` is a protocol error;
- optional fields may be missing or null; strings are stripped (vast's carry trailing newlines),
  and an empty string becomes `None`;
- numbers may arrive as numeric strings (`HostPort` always does) and are converted; a value of the
  wrong kind altogether (a list where a number belongs) is a protocol error, because guessing would
  hide a changed API.

Every failure raises `ParseError`; the client re-raises it as `VastProtocolError` with the
operation and endpoint it came from.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Mapping

from reconciler.model import observed

Row = Mapping[str, object]


class ParseError(ValueError):
    """The body is not shaped like vast's answer."""


@dataclasses.dataclass(frozen=True)
class InstancePage:
    instances: tuple[observed.Instance, ...]
    next_token: str | None


def offers(payload: object) -> list[observed.Offer]:
    rows = _list_under(_object(payload), "offers")
    return [offer(_object(row, "offer row")) for row in rows]


def instance_page(payload: object) -> InstancePage:
    body = _object(payload)
    rows = _list_under(body, "instances")
    token = body.get("next_token")
    if token is not None and not isinstance(token, str):
        raise ParseError(f"next_token is {type(token).__name__}, expected a string or null")
    parsed = tuple(instance(_object(row, "instance row")) for row in rows)
    return InstancePage(parsed, token or None)


def shown_instance(payload: object) -> observed.Instance | None:
    """A show's answer: `{"instances": {...}}`, or `{"instances": null}` when it is gone."""
    body = _object(payload)
    if "instances" not in body:
        raise ParseError("body has no 'instances' key")
    row = body["instances"]
    return None if row is None else instance(_object(row, "instance"))


def created(payload: object) -> observed.CreatedInstance:
    body = _object(payload)
    if "new_contract" not in body:
        raise ParseError("create answer has no 'new_contract'")
    key = _str(body, "instance_api_key")
    return observed.CreatedInstance(_required_int(body, "new_contract"), instance_api_key=key)


def acknowledged(payload: object) -> None:
    """A mutation's answer: `{"success": true, ...}` (refusals were classified already)."""
    _object(payload)


def offer(row: Row) -> observed.Offer:
    return observed.Offer(
        id=_required_int(row, "id"),
        machine_id=_required_int(row, "machine_id"),
        host_id=_required_int(row, "host_id"),
        dph_total=_required_float(row, "dph_total"),
        gpu_name=_str(row, "gpu_name"),
        num_gpus=_int(row, "num_gpus"),
        gpu_ram=_int(row, "gpu_ram"),
        cpu_cores=_int(row, "cpu_cores"),
        cpu_cores_effective=_float(row, "cpu_cores_effective"),
        cpu_ram=_int(row, "cpu_ram"),
        disk_space=_float(row, "disk_space"),
        dph_base=_float(row, "dph_base"),
        storage_cost=_float(row, "storage_cost"),
        min_bid=_float(row, "min_bid"),
        reliability=_float(row, "reliability"),
        verification=_str(row, "verification"),
        geolocation=_str(row, "geolocation"),
        cuda_max_good=_float(row, "cuda_max_good"),
        direct_port_count=_int(row, "direct_port_count"),
        inet_down=_float(row, "inet_down"),
        inet_up=_float(row, "inet_up"),
        rentable=_bool(row, "rentable"),
        rented=_bool(row, "rented"),
        hosting_type=_int(row, "hosting_type"),
        compute_cap=_int(row, "compute_cap"),
        static_ip=_bool(row, "static_ip"),
    )


# The columns of an instance row that `instance` reads: the listing asks vast for these alone
# (`select_cols`). A full row also carries the container's `onstart`, `image_args` and
# `extra_env` (for ray-vast's containers, the 10 KB agent bootloader each): with 25 rows a
# page, most of every listing's bytes were text nobody reads.
INSTANCE_COLUMNS = (
    "id",
    "label",
    "actual_status",
    "intended_status",
    "cur_state",
    "next_state",
    "status_msg",
    "public_ipaddr",
    "ports",
    "machine_id",
    "host_id",
    "dph_total",
    "dph_base",
    "storage_cost",
    "disk_space",
    "start_date",
    "uptime_mins",
    "image_uuid",
    "num_gpus",
    "gpu_name",
    "cpu_cores_effective",
    "ssh_host",
    "ssh_port",
    "is_bid",
    "min_bid",
)


def instance(row: Row) -> observed.Instance:
    return observed.Instance(
        id=_required_int(row, "id"),
        label=_str(row, "label"),
        actual_status=_str(row, "actual_status"),
        intended_status=_str(row, "intended_status"),
        cur_state=_str(row, "cur_state"),
        next_state=_str(row, "next_state"),
        status_msg=_str(row, "status_msg"),
        public_ipaddr=_str(row, "public_ipaddr"),
        ports=ports(row.get("ports")),
        machine_id=_int(row, "machine_id"),
        host_id=_int(row, "host_id"),
        dph_total=_float(row, "dph_total"),
        dph_base=_float(row, "dph_base"),
        storage_cost=_float(row, "storage_cost"),
        disk_space=_float(row, "disk_space"),
        start_date=_float(row, "start_date"),
        uptime_mins=_float(row, "uptime_mins"),
        image=_str(row, "image_uuid"),
        num_gpus=_int(row, "num_gpus"),
        gpu_name=_str(row, "gpu_name"),
        cpu_cores_effective=_float(row, "cpu_cores_effective"),
        ssh_host=_str(row, "ssh_host"),
        ssh_port=_int(row, "ssh_port"),
        is_bid=_bool(row, "is_bid"),
        min_bid=_float(row, "min_bid"),
    )


def ports(raw: object) -> dict[str, int]:
    """Docker's `{"22/tcp": [{"HostIp": ..., "HostPort": "20000"}]}` as `{"22/tcp": 20000}`.

    Absent or null means no ports yet; a port whose binding list is null or empty is not mapped.
    With several bindings (IPv4 and IPv6) the first is taken.
    """
    if raw is None:
        return {}
    mapping = _object(raw, "ports")
    result: dict[str, int] = {}
    for container_port, bindings in mapping.items():
        if not bindings:
            continue
        if not isinstance(bindings, list) or not isinstance(bindings[0], Mapping):
            raise ParseError(f"ports[{container_port!r}] is not a list of bindings")
        host_port = _int(bindings[0], "HostPort")
        if host_port is not None:
            result[container_port.strip()] = host_port
    return result


def _object(value: object, what: str = "body") -> Row:
    if not isinstance(value, Mapping):
        raise ParseError(f"{what} is {type(value).__name__}, expected a JSON object")
    return value


def _list_under(body: Row, key: str) -> list[object]:
    value = body.get(key)
    if not isinstance(value, list):
        shown = "missing" if key not in body else type(value).__name__
        raise ParseError(f"'{key}' is {shown}, expected a list")
    return value


def _bad(row: Row, key: str, expected: str) -> ParseError:
    return ParseError(
        f"field {key!r} of row {row.get('id')!r} is {type(row[key]).__name__}, expected {expected}"
    )


def _int(row: Row, key: str) -> int | None:
    value = row.get(key)
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return int(value.strip())
    raise _bad(row, key, "an integer")


def _float(row: Row, key: str) -> float | None:
    """A finite number: a NaN price would slip through every budget comparison."""
    value = row.get(key)
    if value is None:
        return None
    number: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        with contextlib.suppress(ValueError):
            number = float(value.strip())
    if number is None or not math.isfinite(number):
        raise _bad(row, key, "a finite number")
    return number


def _str(row: Row, key: str) -> str | None:
    value = row.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _bad(row, key, "a string")
    return value.strip() or None


def _bool(row: Row, key: str) -> bool | None:
    value = row.get(key)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise _bad(row, key, "a boolean")


def _required_int(row: Row, key: str) -> int:
    value = _int(row, key)
    if value is None:
        raise ParseError(f"row without {key!r}")
    return value


def _required_float(row: Row, key: str) -> float:
    value = _float(row, key)
    if value is None:
        raise ParseError(f"row {row.get('id')!r} without {key!r}")
    return value
