// What sentencepiece-js imports from Node.js ('fs', 'buffer') and never calls in a browser
// page, which loads the model from bytes: empty modules in the page's import map.
export const Buffer = globalThis.Buffer;
