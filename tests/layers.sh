#!/usr/bin/env bash
# layers.sh - every #include "folder/file.h" in src/ is allowed by src/LAYERS (a folder includes
# its own headers, include/shardload.h and the folders its line names), every include is folder-
# qualified (no blanket include path would resolve a bare name), and cli/ uses the public header
# only. One line per violation; exit 1 if there is any.
# Usage: layers.sh [SRC_ROOT]   (default: the repository of this script)
set -u
ROOT=${1:-$(cd "$(dirname "$0")/.." && pwd)}
table=$ROOT/src/LAYERS
[ -f "$table" ] || { echo "layers: no $table" >&2; exit 1; }
declare -A allowed
while IFS= read -r line; do
    case $line in '#'* | '') continue ;; esac
    allowed[${line%%:*}]=" ${line#*:} "
done <"$table"
bad=0
for dir in "$ROOT"/src/*/; do
    layer=$(basename "$dir")
    [ -n "${allowed[$layer]+x}" ] || { echo "layers: src/$layer/ is not in src/LAYERS"; bad=1; continue; }
    for f in "$dir"*.c "$dir"*.h; do
        [ -f "$f" ] || continue
        while IFS= read -r inc; do
            [ "$inc" = shardload.h ] && continue
            case $inc in
            */*) dep=${inc%%/*} ;;
            *) echo "layers: ${f#"$ROOT"/}: #include \"$inc\" is not folder-qualified"; bad=1; continue ;;
            esac
            [ "$dep" = "$layer" ] && continue
            if [[ ${allowed[$layer]} != *" $dep "* ]]; then
                echo "layers: ${f#"$ROOT"/}: $layer may not include $inc (src/LAYERS: $layer:${allowed[$layer]})"
                bad=1
            fi
        done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
    done
done
for f in "$ROOT"/cli/*.c "$ROOT"/cli/*.h; do
    while IFS= read -r inc; do
        case $inc in shardload.h | cli.h) ;; *) echo "layers: ${f#"$ROOT"/}: the CLI may include only shardload.h, not $inc"; bad=1 ;; esac
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done
[ $bad = 0 ] && echo "layers: ok"
exit $bad
