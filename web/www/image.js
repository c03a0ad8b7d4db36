// Images as model inputs: an NCHW float input with 3 channels is fed the
// picture resized to the declared height and width (224 where symbolic),
// scaled to [0, 1] and normalized with the ImageNet mean and deviation.

import { Tensor } from '../pkg/onyx_web.js';

const MEAN = [0.485, 0.456, 0.406];
const STD = [0.229, 0.224, 0.225];

/** The first input shaped [N, 3, H, W] of a float type, if any. */
export function visionInput(inputs) {
  return inputs.find((m) => m.type?.startsWith('float') && m.shape?.length === 4 && m.shape[1] === 3) ?? null;
}

/** `{ name, tensor }` for the vision input, from an image file. */
export async function imageTensor(file, inputs) {
  const meta = visionInput(inputs);
  if (!meta) throw new Error('this model has no [N, 3, H, W] float input to feed an image to');
  const size = (d) => (typeof d === 'number' && d > 0 ? d : 224);
  const [h, w] = [size(meta.shape[2]), size(meta.shape[3])];
  const bitmap = await createImageBitmap(file);
  const canvas = new OffscreenCanvas(w, h);
  const ctx = canvas.getContext('2d');
  ctx.drawImage(bitmap, 0, 0, w, h);
  const { data } = ctx.getImageData(0, 0, w, h);
  const plane = w * h;
  const out = new Float32Array(3 * plane);
  for (let i = 0; i < plane; i++) {
    for (let c = 0; c < 3; c++) out[c * plane + i] = (data[i * 4 + c] / 255 - MEAN[c]) / STD[c];
  }
  const type = meta.type;
  const tensor = type === 'float32' ? new Tensor('float32', out, [1, 3, h, w]) : new Tensor(type, Array.from(out), [1, 3, h, w]);
  return { name: meta.name, tensor };
}
