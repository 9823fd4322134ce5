# record.sh - sourced by the comparison scripts (compare.sh, sidecar.sh, hostile.sh,
# restart.sh, h3.sh): with RECORD=1 they append their result rows to bench/results/NAME.tsv in
# the repository, each row prefixed with the date, the queue commit and the machine, so
# that the figures docs/performance.md quotes are data in the tree rather than a log in
# prose. Without RECORD=1 nothing in the repository changes.
#
#   record NAME COLUMNS   appends stdin's tab-separated rows (no header) to
#                         bench/results/NAME.tsv, writing the header (date, commit,
#                         host, then COLUMNS, tab-separated) when the file is new.
#
# The commit is `git rev-parse --short HEAD` of the checkout, with "-dirty" when tracked
# files other than bench/results/ differ from it ("-" outside a git checkout). A queue
# given as QUEUE_BIN may have been built from something else: meta.txt of the run has its
# --version line.

record() { # name columns: stdin's rows -> bench/results/NAME.tsv, with RECORD=1 only
  local name=$1 columns=$2 root dir file commit when host
  [[ "${RECORD:-}" == 1 ]] || { cat >/dev/null; return 0; }
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  dir=$root/bench/results
  file=$dir/$name.tsv
  mkdir -p "$dir"
  # safe.directory: run as root (compare.sh's namespace, sidecar.sh's cgroups) in a
  # checkout someone else owns, git would refuse to read it.
  commit=$(git -C "$root" -c safe.directory="$root" rev-parse --short HEAD 2>/dev/null) || commit=-
  if [[ "$commit" != - ]] &&
    ! git -C "$root" -c safe.directory="$root" diff --quiet HEAD -- . ':(exclude)bench/results' 2>/dev/null; then
    commit=$commit-dirty
  fi
  when=$(date -u +%FT%TZ)
  host="$(nproc --all) CPUs, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)"
  [[ -s "$file" ]] || printf 'date\tcommit\thost\t%s\n' "$columns" >"$file"
  awk -v OFS='\t' -v d="$when" -v c="$commit" -v h="$host" 'NF { print d, c, h, $0 }' >>"$file"
  # A run as root should not leave a file its owner cannot edit.
  [[ $EUID -ne 0 ]] || chown --reference="$root/bench" "$dir" "$file" 2>/dev/null || true
  printf 'recorded: %s\n' "$file" >&2
}
