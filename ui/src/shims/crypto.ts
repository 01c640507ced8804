// The part of Node's `crypto` that `hawk` and `@hapi/cryptiles` call when signing a request
// or a bewit URL, over crypto-js (synchronous, as Hawk's code expects; WebCrypto is
// asynchronous and missing outside secure contexts).
import HmacSHA256 from 'crypto-js/hmac-sha256';
import SHA256 from 'crypto-js/sha256';
import Base64 from 'crypto-js/enc-base64';
import { Buffer } from 'buffer';

type Digest = { update(s: string): Digest; digest(encoding: 'base64'): string };

function only256(algorithm: string) {
  if (algorithm !== 'sha256') throw new Error(`unsupported algorithm ${algorithm}`);
}

/** Collects the updates and hashes them at `digest`. */
function digester(hash: (text: string) => string): Digest {
  const parts: string[] = [];
  const d: Digest = {
    update(s) {
      parts.push(s);
      return d;
    },
    digest() {
      return hash(parts.join(''));
    },
  };
  return d;
}

export function createHash(algorithm: string): Digest {
  only256(algorithm);
  return digester((text) => Base64.stringify(SHA256(text)));
}

export function createHmac(algorithm: string, key: string): Digest {
  only256(algorithm);
  return digester((text) => Base64.stringify(HmacSHA256(text, key)));
}

export function randomBytes(n: number): Buffer {
  return Buffer.from(crypto.getRandomValues(new Uint8Array(n)));
}

export function timingSafeEqual(a: Uint8Array, b: Uint8Array): boolean {
  let diff = a.length ^ b.length;
  for (let i = 0; i < Math.min(a.length, b.length); i++) diff |= a[i] ^ b[i];
  return diff === 0;
}

export default { createHash, createHmac, randomBytes, timingSafeEqual };
