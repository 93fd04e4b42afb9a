#!/usr/bin/env bash
# Prints the Debian changelog of version $1 made from CHANGELOG.md: one entry per `## VERSION
# (DATE)` heading, its bullets as the entry's lines. The version being built heads it even when
# CHANGELOG.md has no entry for it yet (a test build).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
version=$1
when=$(date -u -R -d "@${SOURCE_DATE_EPOCH:-$(date +%s)}")
who="consoled maintainers <consoled@example.com>"
entry() { # version, date (RFC 2822), bullet lines on stdin
    echo "consoled ($1) unstable; urgency=medium"
    echo
    # Debian's lines end by column 80.
    sed -e 's/^- /  * /' -e 's/^  \([^*]\)/    \1/' | fmt -w 78 -t
    echo
    echo " -- $who  $2"
    echo
}
if ! grep -q "^## $version " "$here/CHANGELOG.md"; then
    echo "  * Build $version of the source tree." | entry "$version" "$when"
fi
while IFS= read -r line; do
    if [[ $line == "@@ "* ]]; then
        [ -n "${body:-}" ] && printf '%s\n' "$body" | entry "$v" "$(date -u -R -d "$d 12:00")"
        read -r _ v d <<<"$line"; body=""
    elif [ -n "$line" ]; then
        body+="${body:+$'\n'}$line"
    fi
done < <(awk '/^## /{ v=$2; d=$3; gsub(/[()]/, "", d); print "@@ " v " " d; next }
              v && /^(- |  )/ { print }' "$here/CHANGELOG.md")
[ -n "${body:-}" ] && printf '%s\n' "$body" | entry "$v" "$(date -u -R -d "$d 12:00")"
exit 0
