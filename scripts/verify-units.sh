#!/usr/bin/env bash
# verify-units.sh — check the systemd units in configs/systemd with
# systemd-analyze: `verify` (syntax, directives, values) and, where this
# systemd supports it, an offline `security` review whose exposure score must
# stay at or below MAX_EXPOSURE tenths (default 30, i.e. 3.0 on
# systemd-analyze's scale where 0 is locked down and 10 wide open).
#
# Prints "skipped: systemd-analyze not installed" and exits 0 when the tool is
# missing, so it can run anywhere; configs/configs_test.go runs it under
# `make test` when the tool is present.
#
# verify refuses a unit whose ExecStart binary does not exist, and this
# machine need not have /usr/local/bin/tempest-*: the units are checked as
# copies whose binary paths point at stub executables in a temporary
# directory. Nothing else is rewritten.
set -euo pipefail
cd "${BASH_SOURCE[0]%/*}/.."

MAX_EXPOSURE=${MAX_EXPOSURE:-30}

if ! command -v systemd-analyze >/dev/null 2>&1; then
	echo "skipped: systemd-analyze not installed"
	exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/bin"
for role in gate manager worker; do
	printf '#!/bin/sh\nexit 0\n' >"$tmp/bin/tempest-$role"
	chmod +x "$tmp/bin/tempest-$role"
done
units=()
for unit in configs/systemd/*.service; do
	name=$(basename "$unit")
	sed "s#/usr/local/bin/tempest-#$tmp/bin/tempest-#g" "$unit" >"$tmp/$name"
	units+=("$tmp/$name")
done

status=0
# verify exits 0 on unknown keys and unparsable values (it only warns), so
# any output at all is a failure.
if ! out=$(systemd-analyze verify --man=no "${units[@]}" 2>&1) || [ -n "$out" ]; then
	echo "FAIL systemd-analyze verify:"
	echo "${out//$tmp\//configs/systemd/}"
	status=1
else
	echo "ok   systemd-analyze verify: ${#units[@]} units"
fi

if systemd-analyze security --help 2>/dev/null | grep -q -- '--offline'; then
	for u in "${units[@]}"; do
		name=$(basename "$u")
		if out=$(systemd-analyze security --offline=true --threshold="$MAX_EXPOSURE" --no-pager "$u" 2>&1); then
			echo "ok   $name: $(grep -o 'Overall exposure level.*' <<<"$out" | sed 's/.*: //')"
		else
			echo "FAIL $name: exposure above $MAX_EXPOSURE tenths"
			echo "$out" | grep -v '^✓' || true
			status=1
		fi
	done
else
	echo "skipped: this systemd-analyze has no offline security review (systemd < 250)"
fi
exit $status
