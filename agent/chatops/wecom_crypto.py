"""WeCom (企业微信) callback crypto: SHA1 signature, AES-256-CBC with the EncodingAESKey, corp id check.

Written against WeCom's published scheme with `cryptography` (the same one wechatpy implements):
signature = sha1(sorted(token, timestamp, nonce, encrypt)); key = base64(EncodingAESKey + "="),
IV = key[:16]; plaintext = random(16) + len(msg) (4 bytes, network order) + msg + receiveid,
PKCS#7-padded to 32-byte blocks.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import struct

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

BLOCK = 32


class WeComCryptoError(ValueError):
    """A callback that fails the signature, does not decrypt, or was meant for another corp."""


def signature(token: str, timestamp: str, nonce: str, encrypted: str) -> str:
    return hashlib.sha1("".join(sorted([token, timestamp, nonce, encrypted])).encode()).hexdigest()


def pkcs7_pad(data: bytes, block: int = BLOCK) -> bytes:
    n = block - len(data) % block
    return data + bytes([n]) * n


def pkcs7_unpad(data: bytes, block: int = BLOCK) -> bytes:
    if not data:
        raise WeComCryptoError("empty plaintext")
    n = data[-1]
    if not 1 <= n <= block or data[-n:] != bytes([n]) * n:
        raise WeComCryptoError("bad padding")
    return data[:-n]


class WeComCrypto:
    def __init__(self, token: str, encoding_aes_key: str, corp_id: str) -> None:
        if len(encoding_aes_key) != 43:
            raise WeComCryptoError("EncodingAESKey is 43 characters")
        self.token, self.corp_id = token, corp_id
        self.key = base64.b64decode(encoding_aes_key + "=")
        if len(self.key) != 32:
            raise WeComCryptoError("EncodingAESKey does not decode to 32 bytes")

    def _cipher(self) -> Cipher:
        return Cipher(algorithms.AES(self.key), modes.CBC(self.key[:16]))

    def check_signature(self, msg_signature: str, timestamp: str, nonce: str, encrypted: str) -> None:
        expected = signature(self.token, timestamp, nonce, encrypted)
        sent = (msg_signature or "").lower()
        if not (sent.isascii() and hmac.compare_digest(expected, sent)):
            raise WeComCryptoError("signature does not match")

    def encrypt(self, message: str, *, random16: bytes | None = None) -> str:
        msg = message.encode()
        plain = (random16 or os.urandom(16)) + struct.pack(">I", len(msg)) + msg + self.corp_id.encode()
        enc = self._cipher().encryptor()
        return base64.b64encode(enc.update(pkcs7_pad(plain)) + enc.finalize()).decode()

    def decrypt(self, encrypted: str) -> str:
        try:
            raw = base64.b64decode(encrypted, validate=True)
        except ValueError:
            raise WeComCryptoError("not base64") from None
        if not raw or len(raw) % 16:
            raise WeComCryptoError("ciphertext is not whole AES blocks")
        dec = self._cipher().decryptor()
        plain = pkcs7_unpad(dec.update(raw) + dec.finalize())
        if len(plain) < 20:
            raise WeComCryptoError("plaintext too short")
        (length,) = struct.unpack(">I", plain[16:20])
        msg, receive_id = plain[20:20 + length], plain[20 + length:]
        if len(msg) != length:
            raise WeComCryptoError("message length does not match")
        if receive_id.decode(errors="replace") != self.corp_id:
            raise WeComCryptoError("message is for another corp id")
        try:
            return msg.decode()
        except UnicodeDecodeError:
            raise WeComCryptoError("message is not UTF-8") from None

    def verify_and_decrypt(self, msg_signature: str, timestamp: str, nonce: str, encrypted: str) -> str:
        self.check_signature(msg_signature, timestamp, nonce, encrypted)
        return self.decrypt(encrypted)

    def sign(self, timestamp: str, nonce: str, encrypted: str) -> str:
        return signature(self.token, timestamp, nonce, encrypted)
