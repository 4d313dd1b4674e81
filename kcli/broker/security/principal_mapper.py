"""``ssl.principal.mapping.rules`` (Kafka's SslPrincipalMapper, KIP-371; kafka-security.md §3.3): the name of a TLS
client's principal from its certificate's RFC 2253 DN. Pure functions."""

from __future__ import annotations

import re
from dataclasses import dataclass


_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE)
_BACK_REFERENCE = re.compile(r"\$(\d+)")


@dataclass(frozen=True)
class _Rule:
    pattern: str | None = None  # None: DEFAULT
    replacement: str = ""
    lower: bool = False
    upper: bool = False

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        regex = re.compile(self.pattern)
        if regex.fullmatch(dn) is None:
            return None
        replacement = _escape_missing_groups(self.replacement, regex.groups)
        result = regex.sub(lambda m: _java_replacement(replacement, m), dn)
        if self.lower:
            return result.lower()
        if self.upper:
            return result.upper()
        return result

    def __str__(self) -> str:
        if self.pattern is None:
            return "DEFAULT"
        return "RULE:" + self.pattern + "/" + self.replacement + ("/L" if self.lower else "/U" if self.upper else "")


def _escape_missing_groups(replacement: str, groups: int) -> str:
    """Kafka's Rule.escape (from Apache NiFi): a ``$n`` beyond the group count is literal (digits trimmed first)."""
    if groups == 0:
        return replacement
    value = replacement
    for match in list(_BACK_REFERENCE.finditer(replacement)):
        digits = match.group(1)
        if digits.startswith("0"):
            continue
        number = int(digits)
        while number > groups and number >= 10:
            number //= 10
        if number > groups:
            start = value.find("$" + digits)
            if start >= 0 and (start == 0 or value[start - 1] != "\\"):
                value = value[:start] + "\\" + value[start:]
    return value


def _java_replacement(replacement: str, match: re.Match[str]) -> str:
    """Java's Matcher.appendReplacement: ``\\x`` is x, ``$n`` is group n (as many digits as name a group)."""
    out: list[str] = []
    i = 0
    while i < len(replacement):
        char = replacement[i]
        if char == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1])
            i += 2
        elif char == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
            number = int(replacement[i + 1])
            i += 2
            while i < len(replacement) and replacement[i].isdigit() and number * 10 + int(replacement[i]) <= (
                    match.re.groups):
                number = number * 10 + int(replacement[i])
                i += 1
            if number > match.re.groups:
                raise ValueError(f"No group {number}")
            out.append(match.group(number) or "")
        else:
            out.append(char)
            i += 1
    return "".join(out)


class SslPrincipalMapper:
    """``ssl.principal.mapping.rules``: a comma list of ``DEFAULT`` and ``RULE:<regex>/<replacement>/[L|U]``,
    tried in order on the certificate's RFC 2253 DN; the first that matches the whole DN gives the name."""

    def __init__(self, rules: list[_Rule]) -> None:
        self.rules = rules

    @classmethod
    def from_rules(cls, text: str | None) -> SslPrincipalMapper:
        parts = [m.group(1) for m in _RULE_SPLITTER.finditer((text if text is not None else "DEFAULT").strip())]
        rules = []
        for part in parts:
            match = _RULE_PARSER.match(part)
            if match is None:
                raise ValueError(f"Invalid rule: {part}")
            if match.end() != len(part):
                raise ValueError(f"Invalid rule: `{part}`, unmatched substring: `{part[match.end():]}`")
            if match.group(1) is not None:
                rules.append(_Rule())
            elif match.group(2) is not None:
                try:
                    re.compile(match.group(2))
                except re.error as exc:
                    raise ValueError(f"Invalid rule: {part}: {exc}") from None
                rules.append(_Rule(match.group(2), match.group(4), match.group(6) == "L", match.group(6) == "U"))
        return cls(rules)

    def name(self, dn: str) -> str:
        for rule in self.rules:
            principal = rule.apply(dn)
            if principal is not None:
                return principal
        raise LookupError(f"No rules apply to {dn}, rules [{', '.join(map(str, self.rules))}]")

    def __str__(self) -> str:
        return f"SslPrincipalMapper(rules = [{', '.join(map(str, self.rules))}])"
