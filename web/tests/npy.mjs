// Reading the .npy files `onyx run --output-dir` writes (little-endian, C order).

const TYPES = {
  '<f4': Float32Array, '<f8': Float64Array, '<i4': Int32Array, '<i8': BigInt64Array,
  '<i2': Int16Array, '|i1': Int8Array, '|u1': Uint8Array, '|b1': Uint8Array, '<u2': Uint16Array,
  '<u4': Uint32Array, '<u8': BigUint64Array,
};

/** `{ dims, data }` of a .npy buffer. */
export function readNpy(buf) {
  if (buf.toString('latin1', 1, 6) !== 'NUMPY') throw new Error('not a .npy file');
  const major = buf[6];
  const headerLen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const start = major === 1 ? 10 : 12;
  const header = buf.toString('latin1', start, start + headerLen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  if (/'fortran_order':\s*True/.test(header)) throw new Error('Fortran-order .npy is not supported');
  const dims = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',').map((s) => s.trim()).filter(Boolean).map(Number);
  const Type = TYPES[descr];
  if (!Type) throw new Error(`unsupported .npy dtype ${descr}`);
  const body = buf.subarray(start + headerLen);
  const copy = new Uint8Array(body.length);
  copy.set(body);
  return { dims, data: new Type(copy.buffer, 0, copy.length / Type.BYTES_PER_ELEMENT) };
}
