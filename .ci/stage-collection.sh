#!/usr/bin/env bash
# Copy the collection into DEST/ansible_collections/gpuops/fleet for ansible-test,
# which refuses a symlinked path and needs that directory layout.
# What is copied: every file git tracks plus untracked files git does not ignore
# (the same set a commit would hold), so build outputs and venvs stay out.
# The copy gets its own git repository (nothing committed) so that ansible-test
# lists its files with git, exactly as it would in a checkout of the collection;
# without it, ansible-test would walk up to this repository, where the copy is
# ignored, and find no files at all.
set -euo pipefail

repo_root=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:?usage: stage-collection DEST_ROOT}
target="$dest/ansible_collections/gpuops/fleet"

rm -rf "$target"
mkdir -p "$target"

cd "$repo_root"
# -z: names with any character; skip index entries deleted from the work tree
git ls-files -z --cached --others --exclude-standard --deduplicate \
  | while IFS= read -r -d '' path; do
      if [[ -e "$path" || -L "$path" ]]; then printf '%s\0' "$path"; fi
    done \
  | tar --null --no-recursion --files-from=- -cf - \
  | tar -xf - -C "$target"

git -C "$target" init --quiet
echo "staged $(git -C "$target" ls-files --others --exclude-standard | wc -l) files in $target"
