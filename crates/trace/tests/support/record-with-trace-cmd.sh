#!/usr/bin/env bash
# Records a small workload with Debian's `trace-cmd record` into OUT.dat.
#
#   record-with-trace-cmd.sh OUT.dat [--stacks] [trace-cmd record options...]
#
# --stacks records a kernel stack after every event (`-T` on the instance). The other
# options go before the instance and event options, so they should be global ones such as
# `--file-version 7` or `--compression zstd`.
#
# What it records: lock:contention_begin/end, sched:sched_switch, sched:sched_waking and
# the ipi system on the mono clock (VMSCALE_XCHECK_CLOCK names another), in a private
# instance `vmscale-xcheck-<pid>`, while 200
# short processes fork at once (forks on a few CPUs contend on locks and send IPIs).
# VMSCALE_XCHECK_EVENTS (trace-cmd instance options, e.g. "-b 65536 -e raw_syscalls") and
# VMSCALE_XCHECK_WORKLOAD (a shell command) replace those two, for bigger recordings.
# VMSCALE_XCHECK_SECOND_EVENTS (instance options) records a second instance,
# `vmscale-xcheck-<pid>-b`, on the same clock beside the first.
#
# Why the mount namespace: this machine denies writes to /proc/sys/kernel/ftrace_enabled
# and to the set_ftrace_* files. trace-cmd writes the first before recording (and gives up
# when it cannot) and the child that runs the workload reads set_ftrace_pid (and crashes
# when it cannot). Inside `unshare -m` writable placeholder files are bind-mounted over
# them; the mounts vanish with the namespace.
#
# Why the instance is made here: the placeholders must be mounted over its files before
# trace-cmd starts. trace-cmd 3.1 still removes it when it finishes (and then complains
# that the instance's set_ftrace_* files are gone: harmless); if trace-cmd fails before
# that, the instance is removed here. The top-level buffer is never touched.
#
# Version 6 files also make trace-cmd 3.1 warn "Cannot find description for buffer": it
# looks for a top-level buffer it did not record. The top-level table is written anyway,
# empty.
set -euo pipefail

out=${1:?usage: record-with-trace-cmd.sh OUT.dat [--stacks] [trace-cmd record options...]}
shift
instance_options=(-C "${VMSCALE_XCHECK_CLOCK:-mono}")
if [ "${1:-}" = --stacks ]; then
    instance_options+=(-T)
    shift
fi
command -v trace-cmd >/dev/null || { echo "trace-cmd is not installed" >&2; exit 1; }
command -v unshare >/dev/null || { echo "unshare is not installed" >&2; exit 1; }

tracefs=/sys/kernel/tracing
[ -d "$tracefs/instances" ] || mount -t tracefs nodev "$tracefs"
name=vmscale-xcheck-$$
names=("$name")
second=()
if [ -n "${VMSCALE_XCHECK_SECOND_EVENTS:-}" ]; then
    names+=("$name-b")
    # Word splitting makes the options separate arguments, as for VMSCALE_XCHECK_EVENTS.
    # shellcheck disable=SC2206
    second=(-B "$name-b" "${instance_options[@]}" $VMSCALE_XCHECK_SECOND_EVENTS)
fi
scratch=$(mktemp -d /tmp/vmscale-xcheck.XXXXXX)

made=()
cleanup() {
    # trace-cmd usually removes the instances itself when it is done.
    local made_name inst
    for made_name in "${made[@]}"; do
        inst=$tracefs/instances/$made_name
        [ -d "$inst" ] || continue
        echo 0 >"$inst/tracing_on" || true
        echo 0 >"$inst/events/enable" || true
        rmdir "$inst" || echo "could not remove $inst" >&2
    done
    rm -rf "$scratch"
    # trace-cmd's per-CPU temporaries, left when it is killed mid-run.
    rm -f "$out".cpu[0-9]* "$out.$name".cpu[0-9]* "$out.$name-b".cpu[0-9]*
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for made_name in "${names[@]}"; do
    mkdir "$tracefs/instances/$made_name"
    made+=("$made_name")
done

# Everything below runs in the private mount namespace.
inner=$(cat <<'INNER'
set -euo pipefail
scratch=$1 out=$2 insts=$3
shift 3
placeholder() {
    local target=$1 content=$2 file
    [ -e "$target" ] || return 0
    file=$(mktemp "$scratch/placeholder.XXXXXX")
    printf '%s' "$content" >"$file"
    mount --bind "$file" "$target"
}
placeholder /proc/sys/kernel/ftrace_enabled 1
for inst in $insts; do
    for f in set_ftrace_pid set_ftrace_filter set_ftrace_notrace set_ftrace_notrace_pid; do
        placeholder "$inst/$f" ''
    done
done
exec trace-cmd record -q -o "$out" "$@"
INNER
)

insts=$(printf "$tracefs/instances/%s " "${names[@]}")
unshare --mount --propagation private bash -c "$inner" record "$scratch" "$out" "$insts" \
    "$@" \
    -B "$name" "${instance_options[@]}" \
    ${VMSCALE_XCHECK_EVENTS:--e lock:contention_begin -e lock:contention_end -e sched:sched_switch -e sched:sched_waking -e ipi} \
    "${second[@]}" \
    bash -c "${VMSCALE_XCHECK_WORKLOAD:-for i in \$(seq 200); do /bin/true & done; wait}"

[ -s "$out" ] || { echo "trace-cmd wrote no $out" >&2; exit 1; }
