"""A broker's current metric values: one GET of its Prometheus endpoint (metrics.http.listener) and the text format
(0.0.4) parsed into samples, for `kctl metrics`."""

from __future__ import annotations

import http.client
import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from kcli.errors import InputError, UsageError

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+-?\d+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float
    type: str = "untyped"  # the family's # TYPE: counter, gauge, summary, histogram, untyped

    def to_json(self) -> dict[str, object]:
        value: object = int(self.value) if self.value.is_integer() and abs(self.value) < 2**53 else self.value
        if self.value != self.value or self.value in (float("inf"), float("-inf")):
            value = str(self.value)
        return {"name": self.name, "labels": self.labels, "value": value, "type": self.type}


@dataclass
class MetricsScrape:
    url: str
    samples: list[Sample] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {"url": self.url, "samples": [s.to_json() for s in self.samples]}


def metrics_url(target: str) -> str:
    """``http://host:port[/path]`` as given (``/metrics`` when it has no path), or ``host:port``."""
    text = target.strip()
    if "://" not in text:
        text = "http://" + text
    parts = urlsplit(text)
    if parts.scheme != "http":
        raise UsageError(f"{target!r}: only http:// endpoints are served (metrics.http.listener)")
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        raise UsageError(f"{target!r} is not a URL or host:port")
    return text if parts.path not in ("", "/") else f"http://{parts.netloc}/metrics"


def scrape_metrics(target: str, *, timeout: float = 10.0, prefix: str | None = None) -> MetricsScrape:
    """The samples of ``target``'s endpoint whose names start with ``prefix`` (all without one). InputError when
    the endpoint cannot be reached or does not answer with metrics."""
    url = metrics_url(target)
    parts = urlsplit(url)
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
    try:
        connection.request("GET", path, headers={"Accept": "text/plain"})
        response = connection.getresponse()
        body = response.read()
    except (OSError, http.client.HTTPException) as exc:
        raise InputError(f"cannot read metrics: {exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}",
                         path=url) from None
    finally:
        connection.close()
    if response.status != 200:
        raise InputError(f"HTTP {response.status} {response.reason}", path=url)
    samples = parse_exposition(body.decode("utf-8", "replace"), url)
    if prefix:
        samples = [s for s in samples if s.name.startswith(prefix)]
    return MetricsScrape(url, samples)


def parse_exposition(text: str, source: str = "metrics") -> list[Sample]:
    """Prometheus' text format: # TYPE lines give each family's type, samples are ``name{labels} value
    [timestamp]``. A line that is neither is an InputError (not a metrics endpoint)."""
    types: dict[str, str] = {}
    samples: list[Sample] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("#"):
            words = line.split(None, 3)
            if len(words) >= 4 and words[1] == "TYPE":
                types[words[2]] = words[3].strip()
            continue
        match = _SAMPLE.match(line)
        if match is None:
            raise InputError(f"line {number} is not a Prometheus sample: {line[:80]!r}", path=source)
        name, _braces, body, value_text = match.group(1), match.group(2), match.group(3), match.group(4)
        try:
            value = float(value_text.replace("Inf", "inf"))
        except ValueError:
            raise InputError(f"line {number}: {value_text!r} is not a number", path=source) from None
        labels = {m.group(1): _unescape(m.group(2)) for m in _LABEL.finditer(body or "")}
        samples.append(Sample(name, labels, value, _family_type(name, types)))
    return samples


def _family_type(name: str, types: dict[str, str]) -> str:
    if name in types:
        return types[name]
    for suffix in ("_sum", "_count", "_bucket"):
        if name.endswith(suffix) and name[: -len(suffix)] in types:
            return types[name[: -len(suffix)]]
    return "untyped"


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)
