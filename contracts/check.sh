#!/usr/bin/env bash
# `npm run check`'s part for the contracts: no breaking change against main (`buf breaking`), and contracts/gen is
# exactly what `npm run contracts` (buf generate) makes of them.
set -euo pipefail
cd "$(dirname "$0")/.."
# (Against main once main holds contracts: the first commit of them has nothing to break.)
if git ls-tree -r --name-only main -- contracts 2>/dev/null | grep -q '\.proto$'; then
  buf breaking --against '.git#branch=main'
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
buf generate --output "$out"
if ! diff -r contracts/gen "$out/contracts/gen" >/dev/null; then
  echo "contracts/gen is not what the contracts generate: run npm run contracts" >&2
  diff -r contracts/gen "$out/contracts/gen" | head -40 >&2
  exit 1
fi
