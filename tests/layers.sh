#!/usr/bin/env bash
# layers.sh - every #include "folder/file.h" in src/ is allowed by src/LAYERS (a folder includes
# its own headers, include/shardload.h and the folders its line names), also every header it
# reaches through the headers it includes (so src/mpi/, whose line has no plan, cannot get at
# plan/plan_data.h through a load header either), every include is folder-qualified (no blanket
# include path would resolve a bare name), and cli/ uses the public header only. One line per
# violation; exit 1 if there is any.
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
includes() { sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$1"; }

# reach[H]: the src/ headers that header H (folder/file.h) includes, directly or not.
declare -A reach
reach_of() {
    local h=$1 inc r
    [ -n "${reach[$h]+x}" ] && return
    reach[$h]=" "   # a cycle ends here
    [ -f "$ROOT/src/$h" ] || return
    r=" "
    while IFS= read -r inc; do
        case $inc in */*) ;; *) continue ;; esac
        reach_of "$inc"
        r+="$inc ${reach[$inc]} "
    done < <(includes "$ROOT/src/$h")
    reach[$h]=$r
}

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
                continue
            fi
            reach_of "$inc"
            for h in ${reach[$inc]}; do
                dep=${h%%/*}
                [ "$dep" = "$layer" ] || [[ ${allowed[$layer]} == *" $dep "* ]] && continue
                echo "layers: ${f#"$ROOT"/}: $layer may not reach $h (through $inc; src/LAYERS: $layer:${allowed[$layer]})"
                bad=1
            done
        done < <(includes "$f")
    done
done
for f in "$ROOT"/cli/*.c "$ROOT"/cli/*.h; do
    while IFS= read -r inc; do
        case $inc in shardload.h | cli.h) ;; *) echo "layers: ${f#"$ROOT"/}: the CLI may include only shardload.h, not $inc"; bad=1 ;; esac
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done
[ $bad = 0 ] && echo "layers: ok"
exit $bad
