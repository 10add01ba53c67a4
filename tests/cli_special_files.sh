#!/usr/bin/env bash
# cli_special_files.sh - a FIFO or a device where a file is read is refused at once (issue 18 item
# 2), never waited on: the checkpoint path, a *.safetensors entry of a directory, the index, the
# directory's config.json, --config and --rules, for every command that reads them. Each run has a
# timeout; a hang is a failure, and so is anything but exit 1 with one line naming the file.
# Usage: cli_special_files.sh path/to/shardload
set -u
SL=${1:?usage: cli_special_files.sh SHARDLOAD}
. "$(dirname "$0")/lib.sh"
command -v mkfifo >/dev/null && command -v timeout >/dev/null || { echo "no mkfifo/timeout"; exit 77; }

tiny_config "$T/cfg.json"
"$SL" synth --config "$T/cfg.json" "$T/single" >/dev/null || fail "synth single"
"$SL" synth --config "$T/cfg.json" "$T/sharded" --max-shard-size 200KB >/dev/null || fail "synth sharded"
[ -f "$T/sharded/model.safetensors.index.json" ] || fail "the sharded checkpoint has no index"

refused() {   # what, file named in the message, command...
    local what=$1 file=$2; shift 2
    local err rc
    err=$(timeout 10 "$@" 2>&1 >/dev/null); rc=$?
    if [ $rc -eq 124 ]; then fail "$what: hung (killed after 10 s)"; return; fi
    [ $rc -eq 1 ] || fail "$what: exit $rc, expected 1: $err"
    [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || fail "$what: not one line: $err"
    [[ $err == "shardload: error: "*"$file"*"not a regular file"* ]] || fail "$what: message: $err"
}

# the checkpoint path itself
mkfifo "$T/fifo.safetensors"
refused "inspect FIFO" "$T/fifo.safetensors" "$SL" inspect "$T/fifo.safetensors"
refused "plan FIFO" "$T/fifo.safetensors" "$SL" plan "$T/fifo.safetensors" --config "$T/cfg.json"
refused "load FIFO" "$T/fifo.safetensors" "$SL" load "$T/fifo.safetensors" --config "$T/cfg.json"
refused "inspect /dev/zero" /dev/zero "$SL" inspect /dev/zero

# a *.safetensors entry of a directory without an index
mkdir "$T/d1" && cp "$T/single/"* "$T/d1/" && mkfifo "$T/d1/extra.safetensors"
refused "inspect dir with a FIFO entry" "$T/d1/extra.safetensors" "$SL" inspect "$T/d1"
refused "load dir with a FIFO entry" "$T/d1/extra.safetensors" "$SL" load "$T/d1"

# a shard the index names, and the index itself
cp -r "$T/sharded" "$T/d2"
shard=$(ls "$T"/d2/model-00001-of-*.safetensors)
rm "$shard" && mkfifo "$shard"
refused "inspect with a FIFO shard" "$shard" "$SL" inspect "$T/d2"
cp -r "$T/sharded" "$T/d3"
rm "$T/d3/model.safetensors.index.json" && mkfifo "$T/d3/model.safetensors.index.json"
refused "inspect with a FIFO index" "$T/d3/model.safetensors.index.json" "$SL" inspect "$T/d3"

# the directory's config.json, --config and --rules
cp -r "$T/single" "$T/d4"
rm "$T/d4/config.json" && mkfifo "$T/d4/config.json"
refused "plan with a FIFO config.json" "$T/d4/config.json" "$SL" plan "$T/d4"
refused "load with a FIFO config.json" "$T/d4/config.json" "$SL" load "$T/d4"
# reshard writes the config it planned with: the directory's own (a FIFO here) is never opened
timeout 60 "$SL" reshard "$T/d4" "$T/out4" --config "$T/cfg.json" >/dev/null 2>"$T/err" ||
    fail "reshard --config beside a FIFO config.json: $(cat "$T/err")"
[ -f "$T/out4/config.json" ] || fail "reshard --config beside a FIFO config.json: no config.json written"
mkfifo "$T/cfg.fifo"
refused "plan --config FIFO" "$T/cfg.fifo" "$SL" plan --config "$T/cfg.fifo"
refused "load --config FIFO" "$T/cfg.fifo" "$SL" load --format dummy --config "$T/cfg.fifo"
refused "synth --config FIFO" "$T/cfg.fifo" "$SL" synth --config "$T/cfg.fifo" "$T/out5"
refused "plan --config /dev/zero" /dev/zero "$SL" plan --config /dev/zero
refused "plan --config directory" "$T/single" "$SL" plan --config "$T/single"
mkfifo "$T/rules.fifo"
refused "plan --rules FIFO" "$T/rules.fifo" "$SL" plan --config "$T/cfg.json" --rules "$T/rules.fifo"
refused "synth --rules FIFO" "$T/rules.fifo" "$SL" synth --config "$T/cfg.json" --rules "$T/rules.fifo" "$T/out6"

# regular files still work, symbolic links to them too
ln -s "$T/cfg.json" "$T/cfg.link"
"$SL" plan --config "$T/cfg.link" >/dev/null || fail "plan --config through a symbolic link"
"$SL" load "$T/sharded" --tp 2 >/dev/null || fail "load the sharded checkpoint"

finish
echo "cli_special_files: all passed"
