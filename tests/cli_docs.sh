#!/usr/bin/env bash
# cli_docs.sh - the shell examples of README.md and docs/**/*.md run, so that the documented CLI
# cannot rot (tests/python/test_docs.py does the same for the ```python blocks).
#
# Every line of a ```sh / ```bash / ```shell / ```console block (console: the "$ " lines) that
# starts with `shardload ` runs, with the CLI under test as `shardload` (a shell function calling
# $SL), in bash, in a fresh working directory per doc file that holds what the examples name
# (PREPARED below). So does every `mpirun ... build/shardload ...` line (build/shardload
# substituted by the CLI under test; Open MPI told by its environment, as in cli_mpi.sh, to allow
# root, oversubscribe and use shared memory) where mpirun and an MPI build are there (else it is
# skipped, saying so) and SKIP does not take it (a hostfile's two hosts). The commands of one doc
# run in its order, so that a later example may use what an earlier one wrote (README: synth tl/,
# reshard tl/ tl-tp4/, load tl-tp4/). Lines ending in "\" are joined; heredoc bodies are not
# commands. A command that exits non-zero fails the test with the doc's file:line, the command as
# run and its stderr, unless a trailing comment
# `# doc-test: exit N` says that the doc shows it failing on purpose. A trailing comment's figures
# with thousands separators (`# 2,008,031,232 bytes per device`) must appear in the command's
# stdout, unless a substitution changed the command (the figure is then another model's).
#
# What the doc names is changed only by the SUBST table (a literal text replacement, each with its
# reason, printed where it applies), and a command is left out only by the SKIP table (an extended
# regular expression on the doc's text, each with its reason, printed where it applies). An entry
# that matches no doc line (skipped or not) fails the test, so neither table outlives the examples
# it was made for.
# The other lines of the shell blocks (make, pip, cc, $B of design.md's benchmark recipe) are not
# `shardload` command lines: they are listed as "not run". A bare ``` block with a
# `shardload ` line fails: label it ```sh so that it runs.
#
# Usage: cli_docs.sh path/to/shardload   (docs from the source tree of this script)
set -u
SL=${1:?usage: cli_docs.sh SHARDLOAD}
SL=$(cd "$(dirname "$SL")" && pwd)/$(basename "$SL")
. "$(dirname "$0")/lib.sh"
TESTS_DIR=$(cd "$(dirname "$0")" && pwd)
SRC_DIR=$(cd "$TESTS_DIR/.." && pwd)
SERVERS=()
trap 'for p in "${SERVERS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$T"' EXIT

# --- the tables ----------------------------------------------------------------------------------
# SUBST: FROM (literal text of the doc's command), TO (@HTTP@ is the loopback server's URL), WHY
SUBST=(
    '../shared/configs/tinyllama-1.1b.json' 'tinyllama-small.json'
    'TinyLlama-1.1B would be 2.2 GB to synthesize: the same architecture (Llama, untied, grouped KV heads: 8 and 2 here, 32 and 4 there) at 2 layers, hidden 256, vocabulary 2048 (5 MB)'
    '/work/shared/configs/qwen3-0.6b.json' 'qwen3-small.json'
    "Qwen3-0.6B would be 1.2 GB to synthesize: the same architecture (Qwen3, tied embeddings, head_dim given) at 2 layers, hidden 256, vocabulary 2048"
    '$CK' 'q3/'
    "the recipe's checkpoint folder, a free variable of the block"
    'http://127.0.0.1:8000/' '@HTTP@/'
    'tests/http_range_server.py on a free port of 127.0.0.1, serving the prepared files (ckpt/ among them)'
    'build/shardload' '"$SL"'
    'the CLI under test'
    '/models/llama-70b' 'ckpt/'
    "the mpirun examples' 70B checkpoint: the prepared ckpt/"
    '/shared/llama-70b-tp4' 'ckpt-tp4/'
    "the reshard example's output folder"
)
# SKIP: ERE on the doc's command, WHY
SKIP=(
    '^shardload load https://host/'
    'needs a TLS server named "host" (cli_https.sh covers https with a CA it makes)'
    's3://bucket/'
    'needs an S3 endpoint at 127.0.0.1:9000 (cli_s3.sh runs one with moto)'
    '^mpirun --hostfile hosts '
    'needs the hostfile'"'"'s two hosts (node1, node2) with 8 GPUs each (cli_mpi.sh runs ranks on one host, cuda ranks on the stand-in)'
)
# PREPARED (the working directory of every doc, and the environment):
#   ckpt/              lib.sh's tiny_config (2 layers, hidden 256, vocabulary 1001: every TP pads),
#                      600 KB shards and an index, config.json
#   SHA256SUMS         what `synth ckpt/ --write-manifest` wrote for it (sha256sum + XXH3 blocks)
#   cfg.json           tiny_config (for load --config cfg.json --format dummy)
#   tinyllama-small.json, qwen3-small.json   the SUBST configs above
#   ../shared/configs/ tests/configs/*.json (the real files), plus llama-3-70b.json (the published
#                      hyper-parameters, written here: tests/configs has none; plan needs no weights)
#   HF_HUB_CACHE       a hub cache laid out as huggingface_hub does (refs/main, snapshots/, blobs/
#                      named by SHA-256) holding hf://Qwen/Qwen3-8B: a synthetic checkpoint of a
#                      Qwen3-8B-shaped config at 2 layers, hidden 256 (the real one is 16 GB)
#   --device cuda      runs on the host-memory CUDA stand-in (SL_CUDART, as cli_cuda.sh)

# --- the working directory -----------------------------------------------------------------------
B="$T/base"
mkdir -p "$B" "$T/w/shared/configs"
small_config() { # FILE ARCH MODEL_TYPE TIE [EXTRA JSON]
    cat >"$1" <<JSON
{"architectures":["$2"],"model_type":"$3","hidden_size":256,"intermediate_size":704,
 "num_attention_heads":8,"num_key_value_heads":2,"num_hidden_layers":2,"vocab_size":2048,
 "tie_word_embeddings":$4,"torch_dtype":"bfloat16","rms_norm_eps":1e-05$5}
JSON
}
tiny_config "$B/cfg.json"
small_config "$B/tinyllama-small.json" LlamaForCausalLM llama false ""
small_config "$B/qwen3-small.json" Qwen3ForCausalLM qwen3 true ',"head_dim":32'
small_config "$T/qwen3-8b-small.json" Qwen3ForCausalLM qwen3 false ',"head_dim":32'
"$SL" synth --config "$B/cfg.json" "$B/ckpt" --max-shard-size 600KB --write-manifest >/dev/null 2>"$T/err" \
    || { echo "skip: synth unavailable: $(cat "$T/err")" >&2; exit 77; }
mv "$B/ckpt/SHA256SUMS" "$B/SHA256SUMS"
cp "$SRC_DIR"/tests/configs/*.json "$T/w/shared/configs/"
cat >"$T/w/shared/configs/llama-3-70b.json" <<'JSON'
{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":8192,"intermediate_size":28672,
 "num_attention_heads":64,"num_key_value_heads":8,"num_hidden_layers":80,"vocab_size":128256,
 "tie_word_embeddings":false,"torch_dtype":"bfloat16","rms_norm_eps":1e-05,"hidden_act":"silu",
 "max_position_embeddings":8192,"rope_theta":500000.0}
JSON
HUBM="$T/hub/models--Qwen--Qwen3-8B" COMMIT=0123456789abcdef0123456789abcdef01234567
"$SL" synth --config "$T/qwen3-8b-small.json" "$T/q8" --max-shard-size 400KB >/dev/null || fail "synth of the hub model"
hub_snapshot "$HUBM" $COMMIT "$T/q8"
mkdir -p "$HUBM/refs"
echo $COMMIT >"$HUBM/refs/main"
export HF_HUB_CACHE="$T/hub"
unset HUGGINGFACE_HUB_CACHE HF_HOME HF_HUB_OFFLINE
FAKE_CUDART=$(dirname "$SL")/tests/libfake_cudart.so

# http://: the loopback range server over the prepared files, where the build has libcurl
HTTP=""
if "$SL" load http://127.0.0.1:1/x/ --remote-retries 0 2>&1 | grep -q "built without it"; then
    SKIP+=('http://' 'this build has no libcurl')
else
    python3 "$TESTS_DIR/http_range_server.py" "$B" "$T/http.port" & SERVERS+=($!)
    for _ in $(seq 200); do [ -s "$T/http.port" ] && break; sleep 0.05; done
    [ -s "$T/http.port" ] || { fail "http_range_server.py did not start"; finish; }
    HTTP="http://127.0.0.1:$(cat "$T/http.port")"
fi

# mpirun: where it is there and the CLI was built with MPI
MPI_WHY=""
MPIENV=(OMPI_MCA_btl=self,vader OMPI_MCA_plm_rsh_agent= OMPI_MCA_rmaps_base_oversubscribe=1
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
        # leak detection off for the ranks only, as in cli_mpi.sh (Open MPI's components leak)
        ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0")
if ! command -v mpirun >/dev/null 2>&1; then
    MPI_WHY="no mpirun here"
elif env "${MPIENV[@]}" timeout 60 mpirun -np 1 "$SL" load "$B/ckpt" --dist cooperative 2>&1 | grep -q "built without it"; then
    MPI_WHY="this build has no MPI"
fi

# --- the examples ----------------------------------------------------------------------------------
# extract DOC...: one record per command line of a shell block (continuations joined):
# KIND<TAB>DOC<TAB>LINE<TAB>TEXT, KIND "sh" or "bare" (a block without a language)
extract() {
    awk -v OFS='\t' '
    FNR == 1 { inb = 0; acc = ""; hd = "" }
    function emit(   t) {
        t = acc; acc = ""
        sub(/^[ \t]+/, "", t)
        if (t == "" || t ~ /^#/) return
        if (kind == "sh" && match(t, /<<-?[ \t]*["\047]?[A-Za-z_][A-Za-z0-9_]*/)) {
            hd = substr(t, RSTART, RLENGTH); sub(/^<<-?[ \t]*["\047]?/, "", hd)
        }
        print kind, FILENAME, start, t
    }
    !inb {
        if ($0 ~ /^[ \t]*```/) {
            lang = $0; sub(/^[ \t]*```/, "", lang); gsub(/[ \t]/, "", lang)
            inb = 1; acc = ""; hd = ""; console = (lang == "console")
            kind = lang ~ /^(sh|bash|shell|console|zsh)$/ ? "sh" : lang == "" ? "bare" : "other"
        }
        next
    }
    /^[ \t]*```[ \t]*$/ { if (acc != "") emit(); inb = 0; next }
    kind == "other" { next }
    {
        line = $0
        if (hd != "") { t = line; gsub(/^[ \t]+|[ \t]+$/, "", t); if (t == hd) hd = ""; next }
        if (acc == "") {
            if (console) { if (line !~ /^[ \t]*\$ /) next; sub(/^[ \t]*\$ /, "", line) }
            start = FNR
        }
        if (line ~ /\\$/) { sub(/\\$/, "", line); acc = acc line " "; next }
        acc = acc line
        emit()
    }' "$@"
}

DOCS=("$SRC_DIR/README.md")
while IFS= read -r d; do DOCS+=("$d"); done < <(find "$SRC_DIR/docs" -name '*.md' | LC_ALL=C sort)
extract "${DOCS[@]}" >"$T/records" || { fail "extracting the shell blocks"; finish; }

declare -A used
ran=0 skipped=0 notrun=0 readme_ran=0 cur=""
while IFS=$'\t' read -r kind doc line cmd; do
    rel=${doc#"$SRC_DIR"/}
    where="$rel:$line"
    mpi=0
    case "$cmd" in shardload\ *) ;; mpirun\ *build/shardload\ *) mpi=1 ;; *)
        [ "$kind" = sh ] && { echo "not run (not a shardload command line): $where: $cmd"; notrun=$((notrun + 1)); }
        continue ;;
    esac
    if [ "$kind" = bare ]; then
        fail "$where: a shardload command in a block without a language (label it \`\`\`sh to run it): $cmd"
        continue
    fi
    if [ "$doc" != "$cur" ]; then # a fresh working directory per doc
        cur=$doc W="$T/w/$(echo "$rel" | tr '/.' '__')"
        cp -a "$B" "$W"
    fi
    for ((i = 0; i < ${#SUBST[@]}; i += 3)); do # in use while the docs have its text (run or not)
        [[ $cmd == *"${SUBST[i]}"* ]] && used["subst$i"]=1
    done
    why=""
    for ((i = 0; i < ${#SKIP[@]}; i += 2)); do
        if [[ $cmd =~ ${SKIP[i]} ]]; then why=${SKIP[i + 1]}; used["skip$i"]=1; break; fi
    done
    [ -z "$why" ] && [ $mpi = 1 ] && why=$MPI_WHY
    if [ -n "$why" ]; then
        echo "SKIPPED $where: $cmd  -- $why"
        skipped=$((skipped + 1))
        continue
    fi
    run=$cmd substituted=0
    for ((i = 0; i < ${#SUBST[@]}; i += 3)); do
        from=${SUBST[i]} to=${SUBST[i + 1]//@HTTP@/$HTTP}
        [[ $run == *"$from"* ]] || continue
        run=${run//"$from"/"$to"}
        substituted=1
        echo "substituted $where: '$from' -> '$to' (${SUBST[i + 2]})"
    done
    want=0
    [[ $cmd =~ doc-test:\ *exit\ *([0-9]+) ]] && want=${BASH_REMATCH[1]}
    env=()
    [[ $run == *"--device cuda"* ]] && env=(SL_CUDART="$FAKE_CUDART")
    [ $mpi = 1 ] && env+=("${MPIENV[@]}")
    echo "run $where: $run"
    (cd "$W" && env SL="$SL" "${env[@]}" timeout 120 bash -c 'shardload() { "$SL" "$@"; }
'"$run") >"$T/out" 2>"$T/err" </dev/null
    rc=$?
    ran=$((ran + 1))
    [ "$rel" = README.md ] && readme_ran=$((readme_ran + 1))
    if [ $rc -ne "$want" ]; then
        fail "$where: exit $rc (the doc expects $want): $run
--- stderr:
$(tail -n 30 "$T/err")"
        continue
    fi
    # figures of the trailing comment: in stdout, unless the command was changed
    comment=$(printf '%s\n' "$cmd" | sed -n 's/^[^#]*[[:space:]]#//p')
    for fig in $(printf '%s\n' "$comment" | grep -oE '(^|[^0-9,])[0-9]{1,3}(,[0-9]{3})+' | grep -oE '[0-9][0-9,]*'); do
        if [ $substituted -eq 1 ]; then
            echo "  figure $fig not checked: the command was substituted"
        elif ! grep -qF -- "$fig" "$T/out" && ! grep -qF -- "${fig//,/}" "$T/out"; then
            fail "$where: the doc's comment says $fig, the output has not got it: $run
--- stdout:
$(head -n 30 "$T/out")"
        fi
    done
done <"$T/records"

for ((i = 0; i < ${#SUBST[@]}; i += 3)); do
    [ -n "${used[subst$i]:-}" ] || fail "SUBST entry '${SUBST[i]}' matches no doc command (stale: remove it)"
done
for ((i = 0; i < ${#SKIP[@]}; i += 2)); do
    [ -n "${used[skip$i]:-}" ] || fail "SKIP entry '${SKIP[i]}' matches no doc command (stale: remove it)"
done
# guards the extraction: the README's CLI section has over ten shardload commands
[ "$readme_ran" -ge 10 ] || fail "only $readme_ran shardload commands of README.md ran (extraction broken?)"
echo "cli_docs: $ran commands ran, $skipped skipped, $notrun other shell lines not run"
finish
echo "cli_docs: ok"
