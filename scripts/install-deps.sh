#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Install what building and testing Tutti needs, from Debian's packages, when it is missing.
# Idempotent: does nothing when everything is present.
set -euo pipefail

packages=(cmake make gcc pkg-config liburing-dev libxxhash-dev libcmocka-dev clang clang-format
	libibverbs1) # libibverbs1: Mooncake's programs and client link it, even over TCP

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing: ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
	sudo=()
elif command -v sudo >/dev/null; then
	sudo=(sudo)
else
	echo "missing packages (${missing[*]}) and no root or sudo to install them" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
