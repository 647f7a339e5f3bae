#!/usr/bin/env bash
# Keeps the documentation's links working: every relative link in README.md and docs/*.md
# ([text](path), [text](path#anchor), [text](#anchor)) names a file or folder that exists, and
# every #anchor into a Markdown file matches one of its headings, slugged as GitHub does
# (lowercase; letters, digits, spaces, '-' and '_' kept, other punctuation dropped; spaces become
# '-'; a repeated heading gets -1, -2, ...; non-ASCII letters, which GitHub keeps, are dropped
# here: keep headings ASCII). Links with a scheme (https:, mailto:) are not
# followed; links inside code (fenced blocks, `spans`) are not links.
# Usage: docs_links.sh [FILE.md ...] (default: README.md docs/*.md), or docs_links.sh --self-test
# (checks that broken links of each kind are caught and good ones pass). Run from the project root.
set -euo pipefail

# Files with known good and broken links; the check must report exactly the broken ones.
self_test() {
  local tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  mkdir "$tmp/sub"
  printf '%s\n' '# Title' '## Hello, World!' '## Hello, World!' '## `code` and C++' '```' '## not a heading' '```' > "$tmp/a.md"
  printf '%s\n' '# B' '## Local part' \
    'good: [a](a.md) [h](a.md#hello-world) [dup](a.md#hello-world-1) [c](a.md#code-and-c) [d](sub/) [l](#local-part)' \
    'ignored: [w](https://example.com/x.md) `[s](missing-in-span.md)`' '```' '[f](missing-in-fence.md)' '```' \
    'broken: [m](missing.md) [n](a.md#nope) [o](#nowhere) [p](a.md#not-a-heading)' > "$tmp/b.md"
  local out status=0
  out=$(bash "$0" "$tmp/b.md") || status=$?
  local want=("link to missing.md:" "link to a.md#nope:" "link to #nowhere:" "link to a.md#not-a-heading:" "4 broken link(s)")
  local ok=1 w
  [ "$status" -ne 0 ] || ok=0
  for w in "${want[@]}"; do grep -qF -- "$w" <<< "$out" || ok=0; done
  [ "$(grep -c ': link to ' <<< "$out")" -eq 4 ] || ok=0
  if [ "$ok" -ne 1 ]; then
    echo "self-test failed: the check reported (exit $status):"
    echo "$out"
    return 1
  fi
  echo "self-test: 4 broken links caught, 6 good ones passed, code ignored"
}

if [ "${1-}" = "--self-test" ]; then
  self_test
  exit
fi

if [ "$#" -gt 0 ]; then
  files=("$@")
else
  files=(README.md docs/*.md)
fi

# Prints one "LINE<TAB>TARGET" per link of a Markdown file, outside code.
links_of() {
  awk '
    /^[[:space:]]*(```|~~~)/ { fenced = !fenced; next }
    fenced { next }
    {
      line = $0
      gsub(/`[^`]*`/, "", line)
      while (match(line, /\]\([^)[:space:]]+\)/)) {
        print NR "\t" substr(line, RSTART + 2, RLENGTH - 3)
        line = substr(line, RSTART + RLENGTH)
      }
    }' "$1"
}

# Prints the anchor of every heading of a Markdown file, one a line.
anchors_of() {
  awk '
    /^[[:space:]]*(```|~~~)/ { fenced = !fenced; next }
    fenced { next }
    /^#+[[:space:]]/ && match($0, /^#+/) && RLENGTH <= 6 {
      s = $0
      sub(/^#+[[:space:]]+/, "", s)
      sub(/[[:space:]]+#+[[:space:]]*$/, "", s)
      sub(/[[:space:]]+$/, "", s)
      gsub(/\]\([^)]*\)/, "", s)
      s = tolower(s)
      gsub(/[^a-z0-9 _-]/, "", s)
      gsub(/ /, "-", s)
      if (s in seen) { seen[s]++; print s "-" seen[s] } else { seen[s] = 0; print s }
    }' "$1"
}

declare -A anchors  # a file's heading anchors, read once
errors=0
checked=0
for file in "${files[@]}"; do
  if [ ! -f "$file" ]; then
    echo "$file: no such file"
    errors=$((errors + 1))
    continue
  fi
  dir=$(dirname "$file")
  while IFS=$'\t' read -r line target; do
    case "$target" in
      *://*|mailto:*) continue ;;
    esac
    checked=$((checked + 1))
    path=${target%%#*}
    anchor=""
    [[ "$target" == *"#"* ]] && anchor=${target#*#}
    if [ -z "$path" ]; then
      dest=$file
    else
      dest=$dir/$path
      if [ ! -e "$dest" ]; then
        echo "$file:$line: link to $target: $path does not exist"
        errors=$((errors + 1))
        continue
      fi
    fi
    if [ -n "$anchor" ]; then
      if [[ "$dest" != *.md ]] || [ ! -f "$dest" ]; then
        echo "$file:$line: link to $target: an anchor into something that is not a Markdown file"
        errors=$((errors + 1))
      elif ! grep -qxF -- "$anchor" <<< "${anchors[$dest]:=$(anchors_of "$dest")}"; then
        echo "$file:$line: link to $target: no heading of $dest has the anchor #$anchor"
        errors=$((errors + 1))
      fi
    fi
  done < <(links_of "$file")
done

if [ "$errors" -ne 0 ]; then
  echo "$errors broken link(s) in ${files[*]}"
  exit 1
fi
echo "$checked relative links in ${#files[@]} files resolve"
