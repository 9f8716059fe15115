// What sentencepiece-js imports from Node.js ('fs', 'buffer'), in the page's import map: of
// 'fs' nothing (its file-path loading is Node.js's), of 'buffer' the one call of the base64
// loading the page uses, `Buffer.from(text, "base64")`, as bytes (sentencepiece-js also makes
// it `globalThis.Buffer` where there is none).
export const Buffer = {
  from(text, encoding) {
    if (encoding !== "base64") throw new Error(`Buffer.from: ${encoding} is not base64`);
    return Uint8Array.from(atob(text), (character) => character.charCodeAt(0));
  },
};
