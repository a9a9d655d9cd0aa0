//! RFC 8785 canonicalization against the cyberphone vectors in `shared/fixtures/jcs`.
