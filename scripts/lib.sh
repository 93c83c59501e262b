# Shared by the scripts that write a results file (source it: `. "$(dirname "$0")/lib.sh"`).

# results_header COMMAND [COMMIT [REPO]]: the lines every results file starts with, so each
# says how it was made: the command, the commit it ran on (HEAD by default, marked when the
# tree has uncommitted changes) and its time, and the machine.
results_header() {
  local command=$1 commit=${2:-HEAD} repo=${3:-.}
  local dirty=""
  if [[ $commit == HEAD ]] && ! git -C "$repo" diff --quiet HEAD; then dirty=' (uncommitted changes)'; fi
  echo "# $command"
  echo "# commit $(git -C "$repo" rev-parse --short "$commit")$dirty, $(date -u +%Y-%m-%dT%H:%M:%SZ): $(git -C "$repo" log -1 --format=%s "$commit" | cut -c1-100)"
  echo "# machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, $(uname -sr)"
}
