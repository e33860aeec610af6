#!/usr/bin/env python3
"""The real huggingface_hub's view of a cache folder, for tests/apps/pretrained_hub_test.cpp.

    python3 tests/hub/hf_cache_check.py download REPO FILE...   # hf_hub_download each FILE (HF_ENDPOINT, HF_HUB_CACHE)
    python3 tests/hub/hf_cache_check.py check REPO FILE...      # try_to_load_from_cache + scan_cache_dir

`check` prints one line per file ("FILE -> PATH" or "FILE -> missing"), then "warnings: N" and the repo's
revisions and size as scan_cache_dir reports them; exit 1 when a file is missing or scan_cache_dir warns.
Exit 77 when huggingface_hub cannot be imported.
"""
import os
import sys

try:
    import huggingface_hub as hf
except Exception as e:
    print(f"skip: {type(e).__name__}: {e}")
    sys.exit(77)


def main():
    mode, repo, files = sys.argv[1], sys.argv[2], sys.argv[3:]
    if mode == "download":
        for f in files:
            print(f, "->", hf.hf_hub_download(repo, f))
        return 0
    bad = 0
    for f in files:
        path = hf.try_to_load_from_cache(repo, f)
        ok = isinstance(path, str) and os.path.isfile(path)
        bad += not ok
        print(f, "->", path if ok else "missing")
    info = hf.scan_cache_dir()
    print(f"warnings: {len(info.warnings)}")
    for w in info.warnings:
        print("  warning:", w)
    for r in info.repos:
        print(f"repo {r.repo_id}: {r.nb_files} files, {r.size_on_disk} bytes, revisions "
              + ", ".join(sorted(rev.commit_hash for rev in r.revisions))
              + ", refs " + ", ".join(sorted(r.refs)))
    return 1 if bad or info.warnings else 0


if __name__ == "__main__":
    sys.exit(main())
