"""The source files of a folder, for meson (which cannot glob), and a check that they are still
the files the build was configured with.

usage: source_folders.py --base DIR --suffix .EXT FOLDER ...
       source_folders.py --base DIR --check --stamp FILE --depfile FILE.d --suffix .EXT FOLDER ...
                         -- LISTED ...

FOLDERs and LISTED paths are relative to DIR (the folder of the meson.build that lists them).
The first form prints the files directly in each FOLDER whose names end with .EXT, one path a
line, sorted (meson.build reads them when it configures). The second, run by the build,
compares them with LISTED, what the configuration read: a file added or removed since then fails
the build with the command that picks it up (meson reruns itself only when a file it read
changes, not when a folder does). Its depfile names the folders, so the check runs again
whenever one of them gains or loses a file.
"""
import argparse
import os
import sys


def folder_files(base: str, folders, suffix: str) -> list:
    """Paths relative to `base` of the files directly in `folders` whose names end with `suffix`."""
    found = []
    for folder in folders:
        for name in os.listdir(os.path.join(base, folder)):
            path = os.path.normpath(os.path.join(folder, name))
            if name.endswith(suffix) and not name.startswith(".") and os.path.isfile(os.path.join(base, path)):
                found.append(path.replace(os.sep, "/"))
    return sorted(found)


def main() -> int:
    argv = sys.argv[1:]
    listed = []
    if "--" in argv:
        listed = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True)
    parser.add_argument("--suffix", required=True)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--stamp")
    parser.add_argument("--depfile")
    parser.add_argument("folders", nargs="+")
    args = parser.parse_args(argv)
    found = folder_files(args.base, args.folders, args.suffix)
    if not args.check:
        print("\n".join(found))
        return 0
    listed = sorted(os.path.normpath(path).replace(os.sep, "/") for path in listed)
    added = sorted(set(found) - set(listed))
    removed = sorted(set(listed) - set(found))
    if added or removed:
        changes = ["added " + path for path in added] + ["removed " + path for path in removed]
        print("source files changed since meson configured this build (%s): run `meson setup "
              "--reconfigure <build folder>`, then build again" % "; ".join(changes), file=sys.stderr)
        return 1
    with open(args.stamp, "w") as f:
        f.write("\n".join(found) + "\n")
    escape = lambda path: path.replace(" ", "\\ ")
    with open(args.depfile, "w") as f:
        f.write("%s: %s\n" % (escape(args.stamp),
                              " ".join(escape(os.path.abspath(os.path.join(args.base, folder)))
                                       for folder in args.folders)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
