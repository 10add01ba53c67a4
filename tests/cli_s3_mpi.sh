#!/usr/bin/env bash
# cli_s3_mpi.sh - MPI ranks loading one checkpoint from S3 (issue 17 item 5): under --dist
# cooperative each object byte is fetched once per job: the data bytes the S3 server sent (counted
# by tests/fault_proxy.py in front of moto, past each file's 8-byte length and header) equal the
# checkpoint bytes the plan needs, and the ranks' bytes_read add up to them; checksums equal one
# process loading the local files. Under --dist independent each rank fetches what its devices
# need. Skips (77) without mpirun, MPI in the build, libcurl or moto.
# Usage: cli_s3_mpi.sh path/to/shardload
set -u
SL=${1:?usage: cli_s3_mpi.sh SHARDLOAD}
command -v mpirun >/dev/null 2>&1 || { echo "skip: no mpirun" >&2; exit 77; }
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/remote_lib.sh"
export OMPI_MCA_btl=self,vader OMPI_MCA_plm_rsh_agent= OMPI_MCA_rmaps_base_oversubscribe=1
RANK_ASAN="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"   # as in cli_mpi.sh
MPIRUN=(env ASAN_OPTIONS="$RANK_ASAN" timeout 120 mpirun --allow-run-as-root --oversubscribe)
tiny_config "$T/tiny.json" 4
"$SL" synth --config "$T/tiny.json" "$T/ck" --max-shard-size 600KB >/dev/null || { fail "synth"; finish; }
probe=$("${MPIRUN[@]}" -np 1 "$SL" load "$T/ck" --dist cooperative 2>&1)
if echo "$probe" | grep -q "built without it"; then echo "skip: built without MPI" >&2; exit 77; fi
start_moto
s3 user "$T/keys" && s3 upload models tiny "$T/ck" && s3 auth 0 || { fail "moto set-up"; finish; }
read -r KEY SECRET <"$T/keys"
export AWS_ACCESS_KEY_ID=$KEY AWS_SECRET_ACCESS_KEY=$SECRET AWS_SHARED_CREDENTIALS_FILE="$T/none" AWS_CONFIG_FILE="$T/none"
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3
reads() { grep -o '"bytes_read":[0-9]*' | grep -o '[0-9]*' | tr '\n' ' '; }
data_served() { awk '$2 == 206 && $5 != "-" && $5 > 8 {s += $3} END {print s + 0}' "$T/$1.log"; }

for mesh in "--tp 4" "--tp 2 --pp 2"; do
    ref=$("$SL" load "$T/ck" $mesh --checksums --json) || { fail "local $mesh"; continue; }
    need=$(echo "$ref" | reads | cut -d' ' -f1)
    start_proxy "$(port_of "$S3E")" coop --fault none
    out=$("${MPIRUN[@]}" -np 4 "$SL" load s3://models/tiny/ --s3-endpoint "$PROXY" $mesh --dist cooperative \
        --checksums --json 2>"$T/err")
    stop_proxy
    [ "$(echo "$out" | sums)" = "$(echo "$ref" | sums)" ] || fail "cooperative $mesh: checksums differ: $(cat "$T/err")"
    set -- $(echo "$out" | reads)
    total=$1; shift
    sum=0; for r in "$@"; do sum=$((sum + r)); done
    [ $# -eq 4 ] && [ "$total" = "$need" ] && [ "$sum" = "$need" ] ||
        fail "cooperative $mesh: ranks read $* (sum $sum, total $total), the plan needs $need"
    [ "$(data_served coop)" = "$need" ] || fail "cooperative $mesh: S3 sent $(data_served coop) data bytes, needed $need"
    start_proxy "$(port_of "$S3E")" indep --fault none
    out=$("${MPIRUN[@]}" -np 4 "$SL" load s3://models/tiny/ --s3-endpoint "$PROXY" $mesh --dist independent \
        --checksums --json 2>"$T/err")
    stop_proxy
    [ "$(echo "$out" | sums)" = "$(echo "$ref" | sums)" ] || fail "independent $mesh: checksums differ: $(cat "$T/err")"
    set -- $(echo "$out" | reads)
    shift
    sum=0; for r in "$@"; do sum=$((sum + r)); done
    [ "$(data_served indep)" = "$sum" ] || fail "independent $mesh: S3 sent $(data_served indep), ranks read $sum"
done
# a rank's failure is every rank's, one line
# a connection reset every third data range: the ranks survive it, each counts its own retries and
# the job's figure is their sum
ref=$("$SL" load "$T/ck" --tp 4 --checksums --json)
start_proxy "$(port_of "$S3E")" flaky --fault reset --every 3
out=$("${MPIRUN[@]}" -np 4 "$SL" load s3://models/tiny/ --s3-endpoint "$PROXY" --tp 4 --dist cooperative \
    --remote-backoff-ms 20 --checksums --json 2>"$T/err")
stop_proxy
[ "$(echo "$out" | sums)" = "$(echo "$ref" | sums)" ] || fail "resets under MPI: checksums differ: $(cat "$T/err")"
set -- $(echo "$out" | nums remote_retries)   # the job's, then each rank's
total=${1:-0}; shift; echo "cli_s3_mpi: resets under MPI: $total retries, ranks $*"
sum=0; for r in "$@"; do sum=$((sum + r)); done
[ $# -eq 4 ] && [ "$total" = "$sum" ] && [ "$total" -gt 0 ] ||
    fail "resets under MPI: retries $total, ranks' $* (the proxy broke $(awk '$4 != "-"' "$T/flaky.log" | wc -l))"
"${MPIRUN[@]}" -np 2 "$SL" load s3://models/missing/ --s3-endpoint "$S3E" --tp 2 --dist cooperative >/dev/null 2>"$T/err"
rc=$?
[ $rc -eq 1 ] && grep -q "s3://models/missing: no \*.safetensors objects" "$T/err" || fail "missing prefix under MPI: rc $rc: $(cat "$T/err")"
finish
