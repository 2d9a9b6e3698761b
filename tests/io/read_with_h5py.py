"""A checkpoint read by a client that is not shardmesh: h5py.

    python3 read_with_h5py.py DIR MPIEXEC... EXPORT_FOR_PYTHON [MPIEXEC_POSTFLAGS...]
    python3 read_with_h5py.py --check DIR

Everything after DIR is the command line that starts export_for_python on
some ranks; DIR is appended to it. It writes DIR/checkpoint.h5, the values
shardmesh::gather returns for each of its tensors as raw little-endian
arrays, and DIR/manifest.json. Then, for every dataset of the manifest: it is
in the file with the element type and shape of the manifest, its values equal
the gathered ones bit for bit, its attributes name the layout it was saved
under (partial axes reduced), the mesh and the element type, and its
"box_checksums" equal the checksums recomputed here from the values, by the
formula of include/shardmesh/io/box_checksum.hpp over the shards of that
layout on that mesh (include/shardmesh/algebra/shard_geometry.hpp). The file
holds no other dataset, and the values and texts of write_value and
write_text are root attributes "value:<name>". --check only checks an
existing DIR.
"""
import itertools
import json
import os
import re
import shutil
import subprocess
import sys

import h5py  # Debian's python3-h5py, in the toolchain's packages
import numpy as np

WORD = 2**64


def check(condition, what):
    if not condition:
        sys.exit(f"FAILED: {what}")


def text(value):
    """A fixed-length string attribute as h5py reads it (bytes), as str."""
    return value.decode() if isinstance(value, (bytes, np.bytes_)) else str(value)


def parse_mesh(notation):
    """'a=2,b=2' -> [('a', 2), ('b', 2)]."""
    axes = []
    for axis in notation.split(","):
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)=([0-9]+)", axis)
        check(m, f"mesh attribute {notation!r}: axis {axis!r} is not name=extent")
        axes.append((m.group(1), int(m.group(2))))
    return axes


def parse_layout(notation, mesh):
    """'S(a,b),C2(a),R' -> one (kind, block size, mesh axis indices) per dimension.

    Only what a saved dataset can carry: no partial suffix."""
    check(" P(" not in notation and not notation.startswith("P("),
          f"layout attribute {notation!r}: partial, but a dataset holds reduced values")
    names = [name for name, _ in mesh]
    dims = []
    for entry in split_top_level(notation):
        m = re.fullmatch(r"R|S\(([^)]+)\)|C([0-9]+)\(([^)]+)\)", entry)
        check(m, f"layout attribute {notation!r}: unsupported dimension entry {entry!r}")
        if entry == "R":
            dims.append(("block", 0, []))
            continue
        axes = (m.group(1) or m.group(3)).split(",")
        check(all(a in names for a in axes), f"layout {notation!r}: axes {axes} not all in the mesh {names}")
        kind, size = ("cyclic", int(m.group(2))) if m.group(2) else ("block", 0)
        check(kind == "block" or size > 0, f"layout {notation!r}: cyclic blocks of 0")
        dims.append((kind, size, [names.index(a) for a in axes]))
    used = [a for _, _, axes in dims for a in axes]
    check(len(used) == len(set(used)), f"layout {notation!r}: a mesh axis used twice")
    return dims


def split_top_level(notation):
    """Splits at the commas outside parentheses: 'S(a,b),R' -> ['S(a,b)', 'R']."""
    entries, depth, start = [], 0, 0
    for i, c in enumerate(notation):
        depth += {"(": 1, ")": -1}.get(c, 0)
        if c == "," and depth == 0:
            entries.append(notation[start:i])
            start = i + 1
    entries.append(notation[start:])
    return entries


def block_part(extent, n, c):
    """Shard c of [0, extent) in n blocks of ceil(extent / n): (begin, end)."""
    chunk = -(-extent // n)
    begin = min(c * chunk, extent)
    return begin, min(begin + chunk, extent)


def held(dim, extent, mesh, coordinates):
    """The global indices of one dimension held at the mesh coordinates."""
    kind, size, axes = dim
    if kind == "block":  # nested: each axis splits the previous axis's shard
        begin, end = 0, extent
        for a in axes:
            sub = block_part(end - begin, mesh[a][1], coordinates[a])
            begin, end = begin + sub[0], begin + sub[1]
        return list(range(begin, end))
    n, s = 1, 0  # shard s of n by mixed radix, first axis major; blocks s, s+n, ...
    for a in axes:
        n *= mesh[a][1]
        s = s * mesh[a][1] + coordinates[a]
    blocks = -(-extent // size)
    return [k * size + j for k in range(s, blocks, n) for j in range(size) if k * size + j < extent]


def box_checksums(values, dims, mesh):
    """Two sums per rank of the mesh over the 32-bit words of the shard that
    rank wrote (the first rank of each replica group): of the words, and of
    word position times word, modulo 2^64; zeros for the other ranks."""
    shape = values.shape
    bits = values.view(f"<u{values.dtype.itemsize}").reshape(-1)
    words = max(1, values.dtype.itemsize // 4)
    strides = [int(np.prod(shape[d + 1:], dtype=np.int64)) for d in range(len(shape))]
    sharding = {a for _, _, axes in dims for a in axes}
    sums, covered = [], np.zeros(values.size, dtype=np.int64)
    for coordinates in itertools.product(*[range(extent) for _, extent in mesh]):  # rank order: row-major
        if any(coordinates[a] != 0 for a in range(len(mesh)) if a not in sharding):
            sums.append([0, 0])  # a copy: its box is written by the rank at 0 on these axes
            continue
        total = total_words = 0
        for index in itertools.product(*[held(dims[d], shape[d], mesh, coordinates) for d in range(len(shape))]):
            position = sum(i * s for i, s in zip(index, strides))
            covered[position] += 1
            element = int(bits[position])
            for j in range(words):  # little-endian 32-bit words, one for elements under 4 bytes
                word = (element >> (32 * j)) & 0xFFFFFFFF
                total_words += word
                total += (position * words + j) * word
        sums.append([total_words % WORD, total % WORD])
    check((covered == 1).all(), "the shards of the saved layout tile the array: every element in exactly one box")
    return sums


def check_dataset(f, directory, entry, mesh_notation):
    name = entry["name"]
    check(name in f and isinstance(f[name], h5py.Dataset), f"{name}: a dataset in the file")
    d = f[name]
    dtype, shape = np.dtype(entry["dtype"]), tuple(entry["shape"])
    check(d.dtype == dtype, f"{name}: element type {d.dtype}, expected {dtype}")
    check(d.shape == shape, f"{name}: shape {d.shape}, expected {shape}")
    values = d[()]
    gathered = np.fromfile(os.path.join(directory, entry["raw"]), dtype=dtype)
    check(gathered.size == values.size, f"{name}: {gathered.size} gathered values for {values.size} elements")
    gathered = gathered.reshape(shape)
    unsigned = f"<u{dtype.itemsize}"  # bit for bit: -0.0 is not 0.0, a NaN equals itself
    differ = np.flatnonzero(values.view(unsigned) != gathered.view(unsigned))
    if differ.size:
        i = differ[0]
        sys.exit(f"FAILED: {name}: {differ.size} values differ from gather's, the first at flat index {i}: "
                 f"{values.reshape(-1)[i]!r} (bits {values.view(unsigned).reshape(-1)[i]:#x}) != "
                 f"{gathered.reshape(-1)[i]!r} (bits {gathered.view(unsigned).reshape(-1)[i]:#x})")

    for attribute in ("layout", "mesh", "element_type", "box_checksums"):
        check(attribute in d.attrs, f"{name}: attribute {attribute!r}")
    layout, mesh_text = text(d.attrs["layout"]), text(d.attrs["mesh"])
    check(text(d.attrs["element_type"]) == entry["element_type"],
          f"{name}: element_type {text(d.attrs['element_type'])!r}, expected {entry['element_type']!r}")
    check(mesh_text == mesh_notation, f"{name}: mesh {mesh_text!r}, the exporter's {mesh_notation!r}")
    # The tensor's layout without its partial axes: a partial tensor is saved reduced.
    saved = entry["layout"].split(" P(")[0]
    check(layout == saved, f"{name}: layout {layout!r}, expected {saved!r} (from {entry['layout']!r})")
    mesh = parse_mesh(mesh_text)
    dims = parse_layout(layout, mesh)
    check(len(dims) == len(shape), f"{name}: layout {layout!r} has {len(dims)} dimensions, the dataset {len(shape)}")
    stored = d.attrs["box_checksums"]
    boxes = int(np.prod([extent for _, extent in mesh]))
    check(stored.dtype == np.dtype("<u8") and stored.shape == (boxes, 2),
          f"{name}: box_checksums {stored.dtype}{stored.shape}, expected uint64 ({boxes}, 2)")
    expected = box_checksums(values, dims, mesh)
    check([[int(s) for s in box] for box in stored] == expected,
          f"{name}: box_checksums {stored.tolist()}, recomputed {expected}")
    return boxes


def check_directory(directory):
    with open(os.path.join(directory, "manifest.json")) as m:
        manifest = json.load(m)
    path = os.path.join(directory, manifest["checkpoint"])
    check(not os.path.exists(path + ".partial"), "no temporary file left after commit")
    with h5py.File(path, "r") as f:
        found = []
        f.visititems(lambda key, item: found.append(key) if isinstance(item, h5py.Dataset) else None)
        listed = [e["name"] for e in manifest["datasets"]]
        check(sorted(found) == sorted(listed), f"the datasets in the file {sorted(found)} are the manifest's {listed}")
        boxes = 0
        for entry in manifest["datasets"]:
            boxes += check_dataset(f, directory, entry, manifest["mesh"])
        root = f.attrs
        check(text(root.get("shardmesh_version", b"")) == manifest["shardmesh_version"],
              f"root attribute shardmesh_version {root.get('shardmesh_version')!r}")
        for name, value in manifest["values"].items():
            check(f"value:{name}" in root, f"root attribute value:{name}")
            check(int(text(root[f"value:{name}"])) == value,
                  f"value:{name} = {root[f'value:{name}']!r}, expected {value}")
        for name, value in manifest["texts"].items():
            check(f"value:{name}" in root, f"root attribute value:{name}")
            check(text(root[f"value:{name}"]) == value, f"value:{name} = {root[f'value:{name}']!r}, expected {value!r}")
    print(f"{path}: {len(listed)} datasets on mesh {manifest['mesh']} ({manifest['ranks']} ranks) read with h5py "
          f"{h5py.version.version}, values and {boxes} box checksums as shardmesh wrote them, "
          f"{len(manifest['values']) + len(manifest['texts'])} values and texts: passed")


def export(directory, command):
    shutil.rmtree(directory, ignore_errors=True)
    done = subprocess.run([*command, directory], capture_output=True, text=True, check=False, timeout=100)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} {directory}: exit {done.returncode}\n{done.stdout}\n{done.stderr}")
    print(done.stdout, end="")


if __name__ == "__main__":
    if sys.argv[1] == "--check":
        check_directory(sys.argv[2])
    else:
        export(sys.argv[1], sys.argv[2:])
        check_directory(sys.argv[1])
