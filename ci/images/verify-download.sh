#!/usr/bin/env bash
# Check a downloaded file against ci/images/downloads.sha256 for this machine's architecture.
#
# Usage: ci/images/verify-download.sh TABLE NAME FILE
#   TABLE  the checksum table (ci/images/downloads.sha256: "name arch sha256" rows)
#   NAME   the row's name, e.g. golang.org/toolchain@v0.0.1-go1.26.8
#   FILE   the downloaded file
# Env:     DOWNLOAD_ARCH  the architecture to check for (default: dpkg's, else uname -m),
#                         in Debian's names (amd64, arm64)
#
# Exit 0 when FILE's sha256 is the table's; 1 (FILE left in place, a message naming NAME, the
# architecture and both hashes) otherwise, and when the table has no row for NAME on this
# architecture: an unknown architecture fails here, never downloads unchecked. Runs in the image
# builder stages too (Debian minbase: bash, coreutils, awk).
set -euo pipefail

die() {
  echo "verify-download: $*" >&2
  exit 1
}

(($# == 3)) || die "usage: verify-download.sh TABLE NAME FILE"
table="$1" name="$2" file="$3"
[[ -f "$table" ]] || die "checksum table $table not found"
[[ -f "$file" ]] || die "$name: downloaded file $file not found"

arch="${DOWNLOAD_ARCH:-$(dpkg --print-architecture 2>/dev/null || uname -m)}"
case "$arch" in
  x86_64) arch=amd64 ;;
  aarch64) arch=arm64 ;;
esac

# The row for this architecture, else the architecture-independent one.
expected=$(awk -v n="$name" -v a="$arch" '
  $1 == n && $2 == a { print $3; found = 1; exit }
  $1 == n && $2 == "all" { all = $3 }
  END { if (!found && all != "") print all }' "$table")
if [[ -z "$expected" ]]; then
  known=$(awk -v n="$name" '$1 == n { printf "%s%s", sep, $2; sep = " " }' "$table")
  die "no sha256 for $name on architecture $arch in $table (rows for: ${known:-none}); add one"
fi
[[ "$expected" =~ ^[0-9a-f]{64}$ ]] ||
  die "$name on $arch is not a download ($table says '$expected'): nothing to check it against"
actual=$(sha256sum "$file" | cut -d' ' -f1)
[[ "$actual" == "$expected" ]] ||
  die "sha256 mismatch for $name ($arch, $file): expected $expected, got $actual"
echo "verify-download: $name ($arch) sha256 $actual OK" >&2
