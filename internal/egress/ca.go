package egress

import (
	"crypto"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
)

// The fleet CA is made by the worker and handed to its proxy (in the
// proxy container's environment, as the control API's token is), so that
// a proxy restarted by the engine (after an OOM kill, say) signs with the
// CA its sandboxes' bundles already hold.

// EnvCA is the proxy's environment variable holding the fleet CA: its
// certificate and its PKCS #8 key, PEM.
const EnvCA = "SANDFLEET_EGRESS_CA"

// MarshalPEM returns the CA's certificate and key, PEM, as ParseCA
// reads them.
func (ca *CA) MarshalPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return nil, err
	}
	return append(append([]byte{}, ca.PEM...), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})...), nil
}

// ParseCA reads a CA as MarshalPEM writes it.
func ParseCA(b []byte) (*CA, error) {
	var certDER, keyDER []byte
	for {
		var blk *pem.Block
		if blk, b = pem.Decode(b); blk == nil {
			break
		}
		switch blk.Type {
		case "CERTIFICATE":
			certDER = blk.Bytes
		case "PRIVATE KEY":
			keyDER = blk.Bytes
		}
	}
	if certDER == nil || keyDER == nil {
		return nil, errors.New("want a CERTIFICATE and a PRIVATE KEY, PEM")
	}
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return nil, fmt.Errorf("the CA's certificate: %w", err)
	}
	key, err := x509.ParsePKCS8PrivateKey(keyDER)
	if err != nil {
		return nil, fmt.Errorf("the CA's key: %w", err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok || !cert.IsCA {
		return nil, errors.New("not a CA certificate and its signing key")
	}
	if _, err := tls.X509KeyPair(pemCert(certDER), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})); err != nil {
		return nil, fmt.Errorf("the CA's key is not its certificate's: %w", err)
	}
	return &CA{cert: cert, key: signer, PEM: pemCert(certDER), leaves: map[string]*tls.Certificate{}}, nil
}

// Fingerprint is the SHA-256 of the CA's certificate, hex: what the
// worker compares to know its sandboxes' bundles trust the proxy's CA.
func (ca *CA) Fingerprint() string { return fingerprintPEM(ca.PEM) }

func fingerprintPEM(b []byte) string {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return ""
	}
	sum := sha256.Sum256(blk.Bytes)
	return hex.EncodeToString(sum[:])
}
