#!/bin/sh
# The README's table of LOCUS_* variables must be the one the library's
# options table prints (between the markers <!-- options:begin/end -->).
#   check_options_doc.sh OPTIONS_TABLE_EXE README [--update]
set -u
exe=$1 readme=$2
tmp=$(mktemp)
trap 'rm -f "$tmp" "$tmp.new"' EXIT
"$exe" >"$tmp" || { echo "options_documented: $exe failed"; exit 1; }
if ! grep -q '<!-- options:begin -->' "$readme" || ! grep -q '<!-- options:end -->' "$readme"; then
  echo "options_documented: $readme has no <!-- options:begin --> / <!-- options:end --> markers"
  exit 1
fi
awk -v table="$tmp" '
  /<!-- options:begin -->/ { print; while ((getline line < table) > 0) print line; skip = 1; next }
  /<!-- options:end -->/ { skip = 0 }
  !skip { print }' "$readme" >"$tmp.new"
if [ "${3:-}" = --update ]; then
  cp "$tmp.new" "$readme"
  echo "options_documented: $readme updated"
  exit 0
fi
if ! diff -u "$readme" "$tmp.new"; then
  echo "options_documented: the README's option table differs from the library's (above)."
  echo "Regenerate it: $0 $exe $readme --update"
  exit 1
fi
echo "options_documented: README lists the $(($(wc -l <"$tmp") - 2)) options of the library"
