#!/usr/bin/env bash
# cli_verify.sh - `load --verify` (issue 17 item 4): the SHA-256 of every checkpoint file computed
# while the bytes stream through staging, checked against a sha256sum manifest or, in a Hugging
# Face cache, the blob name each file links to. Verified loads give the same bytes as plain ones
# (every read engine and mode); a byte flipped anywhere in any file fails the load with one line
# naming that file; a file with no known digest, a bad manifest and --verify where it cannot work
# (dummy weights, cooperative MPI without blocks) are refused before anything is loaded. With the
# XXH3 blocks --write-manifest adds, only the blocks a load reads are checked: the same bytes, a
# flipped byte named with its byte range, a stale manifest refused, and MPI cooperative and
# independent verify what each rank reads.
# Usage: cli_verify.sh path/to/shardload
set -u
SL=${1:?usage: cli_verify.sh SHARDLOAD}
. "$(dirname "$0")/lib.sh"

tiny_ckpt
probe=$("$SL" load "$CK" --verify 2>&1)
if echo "$probe" | grep -q "has no SHA-256"; then echo "skip: built without libcrypto" >&2; exit 77; fi
(cd "$CK" && sha256sum -- *.safetensors >"$T/MANIFEST")
nfiles=$(ls "$CK"/*.safetensors | wc -l)
total=$(cat "$CK"/*.safetensors | wc -c)
ref=$("$SL" load "$CK" --tp 2 --checksums --json | sums)

# 1. a verified load: the same bytes, every file hashed whole, in every engine and mode
for mode in "--io buffered" "--io direct" "--io auto"; do
    for eng in "" pread; do
        out=$(SL_IO_ENGINE=$eng "$SL" load "$CK" --tp 2 $mode --manifest "$T/MANIFEST" --checksums \
              --json --staging 1M 2>"$T/err") || { fail "$mode $eng: $(cat "$T/err")"; continue; }
        [ "$(echo "$out" | sums)" = "$ref" ] || fail "$mode $eng: checksums differ"
        [ "$(echo "$out" | nums verified_files)" = "$nfiles " ] || fail "$mode $eng: verified files: $out"
        [ "$(echo "$out" | nums verified_bytes)" = "$total " ] || fail "$mode $eng: verified bytes: $out"
    done
done
"$SL" load "$CK" --tp 4 --pp 2 --verify --manifest "$T/MANIFEST" | grep -q "^verified $nfiles files ([0-9,]* bytes checked)" \
    || fail "text report"

# 2. the Hugging Face cache: the blob names are the digests
M="$T/hub/models--org--tiny"
C=1111111111111111111111111111111111111111
hub_snapshot "$M" $C "$CK"
mkdir -p "$M/refs"
echo $C >"$M/refs/main"
out=$(HF_HUB_CACHE="$T/hub" "$SL" load hf://org/tiny --tp 2 --verify --checksums --json 2>"$T/err") \
    || fail "hf cache: $(cat "$T/err")"
[ "$(echo "$out" | sums)" = "$ref" ] && [ "$(echo "$out" | nums verified_files)" = "$nfiles " ] \
    || fail "hf cache: $out"

# 3. one byte flipped in any file, anywhere after its header: one line naming the file
flip() { # file offset
    local b
    b=$(dd if="$1" bs=1 skip="$2" count=1 2>/dev/null | od -An -tu1 | tr -d ' ')
    printf "$(printf '\\%03o' $(( (b ^ 1) & 255 )))" | dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null
}
for f in "$CK"/*.safetensors; do
    name=$(basename "$f")
    size=$(stat -c %s "$f")
    hdr=$(( 8 + $(od -An -tu8 -N8 "$f" | tr -d ' ') ))
    for off in $hdr $(( (hdr + size) / 2 )) $(( size - 1 )); do
        rm -rf "$T/bad" && cp -r "$CK" "$T/bad"
        flip "$T/bad/$name" $off
        "$SL" load "$T/bad" --tp 2 --manifest "$T/MANIFEST" >"$T/out" 2>"$T/err"
        one_line_error $? "$T/err" "$T/bad/$name: SHA-256 .* differs from .* (the manifest)" \
            || fail "$name byte $off: $(cat "$T/err")"
        grep -q "^device" "$T/out" && fail "$name byte $off: reported devices"
        # without --verify the same damage loads (the check is what catches it)
        "$SL" load "$T/bad" --tp 2 >/dev/null 2>&1 || fail "$name byte $off: fails even unverified"
    done
done
blob=$(readlink -f "$M/snapshots/$C/$(ls "$CK" | grep safetensors$ | sed -n 2p)")
flip "$blob" $(( $(stat -c %s "$blob") - 2 ))
HF_HUB_CACHE="$T/hub" "$SL" load hf://org/tiny --verify >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "snapshots/$C/.*: SHA-256 .* (its Hugging Face cache blob name)" \
    || fail "hf blob flipped: $(cat "$T/err")"

# 3b. manifests written by synth and reshard (--write-manifest): sha256sum reads them, and a
# pre-sharded folder loads verified; a flipped byte in a rank file is caught
"$SL" synth --config "$T/tiny.json" "$T/sy" --max-shard-size 600KB --write-manifest >/dev/null \
    || fail "synth --write-manifest"
(cd "$T/sy" && sha256sum -c --quiet --strict SHA256SUMS) || fail "synth's SHA256SUMS: sha256sum -c"
# a line per file: the shards, then config.json and the index (checked whole by a load)
[ "$(grep -vc '^#' "$T/sy/SHA256SUMS")" -eq "$(($(ls "$T/sy"/*.safetensors | wc -l) + 2))" ] || fail "synth's SHA256SUMS: lines"
grep -q '  config.json$' "$T/sy/SHA256SUMS" && grep -q '  model.safetensors.index.json$' "$T/sy/SHA256SUMS" ||
    fail "synth's SHA256SUMS names no config.json or index"
[ "$(grep -c '^#xxh3-blocks ' "$T/sy/SHA256SUMS")" -eq "$(ls "$T/sy"/*.safetensors | wc -l)" ] || fail "synth's SHA256SUMS: block records"
ls -a "$T/sy" | grep -q '\.tmp\.' && fail "synth --write-manifest left a temporary file"
# every output gets the mode a new file gets (0666 less the umask): the manifest was 0600 (mkstemp's)
# whatever the umask, and the shards 0644 even under umask 077
for u in 022 077; do
    rm -rf "$T/sy-$u"
    (umask $u && "$SL" synth --config "$T/tiny.json" "$T/sy-$u" --max-shard-size 600KB --write-manifest >/dev/null) \
        || fail "synth under umask $u"
    want=$(printf '%o' $(( 0666 & ~0$u )))
    for f in "$T/sy-$u"/*; do
        [ "$(stat -c %a "$f")" = "$want" ] || fail "umask $u: $(basename "$f") has mode $(stat -c %a "$f"), not $want"
    done
done
"$SL" reshard "$CK" "$T/rs" --tp 2 --write-manifest >/dev/null 2>"$T/err" || fail "reshard --write-manifest: $(cat "$T/err")"
(cd "$T/rs" && sha256sum -c --quiet SHA256SUMS) || fail "reshard's SHA256SUMS: sha256sum -c"
out=$("$SL" load "$T/rs" --tp 2 --manifest "$T/rs/SHA256SUMS" --checksums --json 2>"$T/err") \
    || fail "pre-sharded, verified: $(cat "$T/err")"
[ "$(echo "$out" | sums)" = "$ref" ] && [ "$(echo "$out" | nums verified_files)" = "2 " ] \
    || fail "pre-sharded, verified: $out"
# upper-case digests, which sha256sum -c takes too
grep -v '^#' "$T/rs/SHA256SUMS" | awk '{printf "%s  %s\n", toupper($1), $2}' >"$T/rs-upper"
"$SL" load "$T/rs" --tp 2 --manifest "$T/rs-upper" >/dev/null 2>"$T/err" || fail "upper-case digests: $(cat "$T/err")"
grep -v '^#' "$T/rs/SHA256SUMS" >"$T/rs-sha"
flip "$T/rs/model-rank-1-part-0.safetensors" 9000
"$SL" load "$T/rs" --tp 2 --manifest "$T/rs/SHA256SUMS" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "model-rank-1-part-0.safetensors: bytes \[0, [0-9]*) (block 0) have XXH3 [0-9a-f]*, the manifest" \
    || fail "pre-sharded, flipped (blocks): $(cat "$T/err")"
"$SL" load "$T/rs" --tp 2 --manifest "$T/rs-sha" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "model-rank-1-part-0.safetensors: SHA-256 .* (the manifest)" \
    || fail "pre-sharded, flipped (SHA-256): $(cat "$T/err")"
# config.json decides what a pre-sharded folder's parts are (heads, and so the qkv rows): one
# edited after the manifest is refused, naming it (its blocks passed, and the load gave other bytes)
"$SL" reshard "$CK" "$T/rs-cfg" --tp 2 --write-manifest >/dev/null 2>"$T/err" || fail "reshard for config: $(cat "$T/err")"
sed -i 's/"num_key_value_heads": *2/"num_key_value_heads": 1/' "$T/rs-cfg/config.json"
"$SL" load "$T/rs-cfg" --tp 2 --manifest "$T/rs-cfg/SHA256SUMS" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "rs-cfg/config.json: its SHA-256 is [0-9a-f]*, the manifest's [0-9a-f]*: the file is not the one" \
    || fail "pre-sharded, config.json edited: $(cat "$T/err")"
rm "$T/rs-cfg/config.json"
"$SL" load "$T/rs-cfg" --tp 2 --manifest "$T/rs-cfg/SHA256SUMS" --config "$T/tiny.json" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "names config.json, which .*rs-cfg does not have" || fail "pre-sharded, config.json gone: $(cat "$T/err")"
# a manifest of `sha256sum DIR/*` names DIR/config.json: checked too (by its last path component)
"$SL" reshard "$CK" "$T/rs-star" --tp 2 >/dev/null 2>"$T/err" || fail "reshard for sha256sum: $(cat "$T/err")"
sha256sum "$T/rs-star"/* >"$T/star.sha"
sed -i 's/"num_key_value_heads": *2/"num_key_value_heads": 1/' "$T/rs-star/config.json"
"$SL" load "$T/rs-star" --tp 2 --manifest "$T/star.sha" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "rs-star/config.json: its SHA-256 is" || fail "sha256sum DIR/* manifest, config edited: $(cat "$T/err")"
# a manifest of two folders names config.json twice: this folder's must be one of them
mkdir -p "$T/multi" && cp -r "$CK" "$T/multi/a"
sed 's/"rms_norm_eps": *[0-9e.-]*/"rms_norm_eps":1e-06/' "$T/tiny.json" >"$T/tiny6.json"
"$SL" synth --config "$T/tiny6.json" "$T/multi/b" --max-shard-size 2MB >/dev/null || fail "synth b"
(cd "$T/multi" && sha256sum a/* b/*) >"$T/multi/MAN"
"$SL" load "$T/multi/a" --tp 2 --manifest "$T/multi/MAN" >/dev/null 2>"$T/err" || fail "two-folder manifest: $(cat "$T/err")"
sed -i 's/"rms_norm_eps": *[0-9e.-]*/"rms_norm_eps":1e-04/' "$T/multi/a/config.json"
"$SL" load "$T/multi/a" --tp 2 --manifest "$T/multi/MAN" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "a/config.json: its SHA-256 is [0-9a-f]*, the manifest's [0-9a-f]* (or another of its lines)" ||
    fail "two-folder manifest, config edited: $(cat "$T/err")"
# the manifest is read once per load, for the side files and the blocks alike (it was read twice)
if command -v strace >/dev/null && strace -f -qq -e trace=openat -o "$T/trace" true 2>/dev/null; then
    strace -f -qq -e trace=open,openat -o "$T/trace" "$SL" load "$T/sy" --tp 2 --manifest "$T/sy/SHA256SUMS" \
        >/dev/null 2>"$T/err" || fail "traced load: $(cat "$T/err")"
    n=$(grep -c "\"$T/sy/SHA256SUMS\"" "$T/trace")
    [ "$n" = 1 ] || fail "the manifest was opened $n times in one load: $(grep SHA256SUMS "$T/trace")"
else
    echo "cli_verify: no working strace: the manifest's reads not counted" >&2
fi
"$SL" reshard "$CK" "$T/rs-mpi" --tp 2 --dist independent --write-manifest >/dev/null 2>"$T/err"
[ $? -eq 2 ] && grep -q "write-manifest is for one process" "$T/err" || fail "--write-manifest under MPI: $(cat "$T/err")"

# 4. refused before loading: no digest, a bad manifest, and where verifying cannot work
"$SL" load "$CK" --verify >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "--verify knows no SHA-256 for it (not a Hugging Face cache blob; give a manifest)" \
    || fail "no digest: $(cat "$T/err")"
head -n 1 "$T/MANIFEST" >"$T/short"
"$SL" load "$CK" --manifest "$T/short" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "not in the manifest" || fail "short manifest: $(cat "$T/err")"
{ cat "$T/MANIFEST"; echo "not a line"; } >"$T/badman"
"$SL" load "$CK" --manifest "$T/badman" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "badman: line $((nfiles + 1)) is not '<sha256>  <file>'" || fail "bad line: $(cat "$T/err")"
mkfifo "$T/fifo"
timeout 10 "$SL" load "$CK" --manifest "$T/fifo" >/dev/null 2>"$T/err"
rc=$?
[ $rc -ne 124 ] || fail "FIFO manifest blocked"
one_line_error $rc "$T/err" "not a regular file" || fail "FIFO manifest: $(cat "$T/err")"
"$SL" load --config "$T/tiny.json" --format dummy --verify >/dev/null 2>"$T/err"
[ $? -eq 2 ] && grep -q "format dummy reads none" "$T/err" || fail "dummy: $(cat "$T/err")"   # a usage error
# 5. blocks: a checkpoint of several 1 MiB blocks per file, a manifest from synth
cat >"$T/mid.json" <<'JSON'
{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":512,"intermediate_size":2048,
 "num_attention_heads":8,"num_key_value_heads":2,"num_hidden_layers":2,"vocab_size":4000,
 "torch_dtype":"bfloat16","tie_word_embeddings":false}
JSON
"$SL" synth --config "$T/mid.json" "$T/mid" --max-shard-size 6MB --write-manifest >/dev/null || fail "synth mid"
MID="$T/mid"
MAN="$MID/SHA256SUMS"
mtotal=$(cat "$MID"/*.safetensors | wc -c)
mfiles=$(ls "$MID"/*.safetensors | wc -l)
mref=$("$SL" load "$MID" --tp 2 --checksums --json | sums)
for mode in "--io buffered" "--io direct"; do
    out=$("$SL" load "$MID" --tp 2 $mode --manifest "$MAN" --checksums --json --staging 4M 2>"$T/err") \
        || { fail "blocks $mode: $(cat "$T/err")"; continue; }
    [ "$(echo "$out" | sums)" = "$mref" ] || fail "blocks $mode: checksums differ"
    [ "$(echo "$out" | nums verified_files)" = "$mfiles " ] || fail "blocks $mode: verified files: $out"
    # one process, every device: each byte of each file is needed, and each read byte is checked
    [ "$(echo "$out" | nums verified_bytes)" = "$mtotal " ] || fail "blocks $mode: verified bytes: $out"
done
"$SL" load "$MID" --tp 2 --manifest "$MAN" --staging 1M >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "the manifest's blocks (1048576 bytes) do not fit a read request" \
    || fail "blocks, small staging: $(cat "$T/err")"
# the budget the message asks for is enough (and --request too small is named as such)
need=$(grep -o 'give --staging of at least [0-9]* MiB' "$T/err" | grep -o '[0-9]*')
[ -n "$need" ] && out=$("$SL" load "$MID" --tp 2 --manifest "$MAN" --staging "${need}MiB" --checksums --json \
    2>"$T/err") && [ "$(echo "$out" | sums)" = "$mref" ] || fail "blocks, suggested staging '$need': $(cat "$T/err")"
"$SL" load "$MID" --tp 2 --manifest "$MAN" --request 512KiB >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "do not fit a read request of 524288 bytes: give --request of at least 1048576" \
    || fail "blocks, small request: $(cat "$T/err")"
f3=$(ls "$MID"/*.safetensors | sed -n 3p)
n3=$(basename "$f3")
s3=$(stat -c %s "$f3")
rm -rf "$T/bad" && cp -r "$MID" "$T/bad"
flip "$T/bad/$n3" $(( 2 * 1048576 + 5 ))
"$SL" load "$T/bad" --tp 2 --manifest "$MAN" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "bad/$n3: bytes \[2097152, 3145728) (block 2) have XXH3" || fail "blocks, flipped: $(cat "$T/err")"
sed "s/^#xxh3-blocks $s3 /#xxh3-blocks $((s3 + 1)) /" "$MAN" >"$T/stale"
"$SL" load "$MID" --tp 2 --manifest "$T/stale" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "$n3: the manifest's blocks are of a file of $((s3 + 1)) bytes, it has $s3: the manifest is stale" \
    || fail "stale manifest: $(cat "$T/err")"
awk -v n="$n3" '/^#xxh3-blocks /{skip = ($NF == n)} skip && /^#/ {next} {print}' "$MAN" >"$T/part"
"$SL" load "$MID" --tp 2 --manifest "$T/part" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "$n3: the manifest has XXH3 blocks for other files" || fail "blocks for some files: $(cat "$T/err")"
# (after the last file's hashes: the side files' lines come after them)
grep -v '  config.json$\|  model.safetensors.index.json$' "$MAN" >"$T/data-only"
{ cat "$T/data-only"; echo "#b 0123456789abcdef"; } >"$T/extra"
"$SL" load "$MID" --tp 2 --manifest "$T/extra" >/dev/null 2>"$T/err"
one_line_error $? "$T/err" "line $(( $(wc -l <"$T/data-only") + 1 )): more block hashes than" || fail "extra hashes: $(cat "$T/err")"

# 6. MPI: cooperative verifies by blocks (each rank the chunks it reads: the job checks each byte
# it reads once), and refuses SHA-256 manifests; independent reads only what its devices need
if command -v mpirun >/dev/null 2>&1; then
    export OMPI_MCA_btl=self,vader OMPI_MCA_plm_rsh_agent= OMPI_MCA_rmaps_base_oversubscribe=1
    MPIRUN=(env ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" timeout 60 mpirun
            --allow-run-as-root --oversubscribe -np 2)
    out=$("${MPIRUN[@]}" "$SL" load "$CK" --tp 2 --dist cooperative --manifest "$T/MANIFEST" 2>&1)
    if ! echo "$out" | grep -q "built without it"; then
        echo "$out" | grep -q "^shardload: error: .*--verify with --dist cooperative needs a manifest with XXH3 blocks" \
            || fail "cooperative, SHA-256: $out"
        out=$("${MPIRUN[@]}" "$SL" load "$CK" --tp 2 --dist independent --manifest "$T/MANIFEST" \
              --checksums --json 2>"$T/err") || fail "independent: $(cat "$T/err")"
        [ "$(echo "$out" | sums)" = "$ref" ] || fail "independent: checksums differ"
        out=$("${MPIRUN[@]}" "$SL" load "$MID" --tp 2 --dist cooperative --manifest "$MAN" \
              --checksums --json 2>"$T/err") || fail "cooperative, blocks: $(cat "$T/err")"
        [ "$(echo "$out" | sums)" = "$mref" ] || fail "cooperative, blocks: checksums differ"
        [ "$(echo "$out" | nums verified_files)" = "$mfiles " ] || fail "cooperative, blocks: files: $out"
        # each rank's budget is cut into a slot per rank and one more: the message says what holds
        "${MPIRUN[@]}" "$SL" load "$MID" --tp 2 --dist cooperative --manifest "$MAN" --staging 2MiB >"$T/out" 2>&1
        need=$(grep -o 'two read and the rest received from other ranks): give --staging of at least [0-9]* MiB' \
               "$T/out" | head -1 | grep -o '[0-9]* MiB' | grep -o '[0-9]*')
        [ -n "$need" ] && out=$("${MPIRUN[@]}" "$SL" load "$MID" --tp 2 --dist cooperative --manifest "$MAN" \
            --staging "${need}MiB" --checksums --json 2>"$T/err") && [ "$(echo "$out" | sums)" = "$mref" ] \
            || fail "cooperative, blocks, suggested staging '$need': $(cat "$T/out" "$T/err")"
        # the ranks' reads are disjoint chunks of whole blocks: checked bytes = bytes read
        [ "$(echo "$out" | nums verified_bytes)" = "$(echo "$out" | nums bytes_read | cut -d' ' -f1) " ] \
            || fail "cooperative, blocks: verified bytes: $out"
        "${MPIRUN[@]}" "$SL" load "$T/bad" --tp 2 --dist cooperative --manifest "$MAN" >"$T/out" 2>&1
        grep -q "^shardload: error: rank [01]: .*bad/$n3: bytes \[2097152, 3145728) (block 2) have XXH3" "$T/out" \
            || fail "cooperative, flipped: $(cat "$T/out")"
        out=$("${MPIRUN[@]}" "$SL" load "$MID" --tp 2 --dist independent --manifest "$MAN" \
              --checksums --json 2>"$T/err") || fail "independent, blocks: $(cat "$T/err")"
        [ "$(echo "$out" | sums)" = "$mref" ] || fail "independent, blocks: checksums differ"
        # rank 0 holds half of each tensor: it reads (and checks) less than the whole files
        r0=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["ranks"][0]["bytes_read"])')
        [ "$r0" -lt "$mtotal" ] || fail "independent, blocks: rank 0 read $r0 of $mtotal"
        [ "$(echo "$out" | nums verified_bytes)" = "$r0 " ] || fail "independent, blocks: verified: $out"
    fi
fi

finish
echo "cli_verify: ok"
