#!/usr/bin/env bash
# Keeps the architecture map (docs/architecture.md) true to the tree: every folder it names (in
# backticks, with a trailing slash) exists, and every folder of engine/, kernels/, server/,
# tests/, configs/ and scripts/ is named. `tests/unit/<folder>/` names the unit-test folders
# whose name is the last part of a named folder (tests/unit/kv/ for engine/kv/).
# To follow a change of the tree, edit the map's table, not this script; a folder that is named
# before it lands goes in `arriving` below. Run from the project root (CTest does).
set -euo pipefail

map=docs/architecture.md
roots=(engine kernels server tests configs scripts)

# Named in the map, not yet in this tree: lands with another branch. Remove the entry once it has.
arriving=()

if [ ! -s "$map" ]; then
  echo "$map is missing or empty"
  exit 1
fi

named=$(grep -o '`[A-Za-z0-9_./<>-]*/`' "$map" | tr -d '`' | sed 's|/$||' | sort -u)
errors=0

for dir in $named; do
  case "$dir" in
    tests/unit/\<folder\>) continue ;;
    *\<*|..*) continue ;;
  esac
  if [ ! -d "$dir" ]; then
    if [[ " ${arriving[*]-} " == *" $dir "* ]]; then
      echo "note: $dir/ is named but not in this tree yet (listed as arriving)"
      continue
    fi
    echo "$map names $dir/, which does not exist"
    errors=$((errors + 1))
  fi
done

last_parts=$(for dir in $named; do basename "$dir"; done | sort -u)
while read -r dir; do
  dir=${dir#./}
  grep -qxF "$dir" <<< "$named" && continue
  if [[ "$dir" == tests/unit/* ]] && grep -qxF 'tests/unit/<folder>' <<< "$named" &&
     grep -qxF "${dir#tests/unit/}" <<< "$last_parts"; then
    continue
  fi
  echo "$map does not name $dir/"
  errors=$((errors + 1))
done < <(find "${roots[@]}" -name node_modules -prune -o -type d -print | sort)

if [ "$errors" -ne 0 ]; then
  echo "$errors mismatch(es) between $map and the tree"
  exit 1
fi
echo "$map matches the tree ($(wc -w <<< "$named") folders named)"
