//! A throwaway PKI for the local control planes: one CA, a serving certificate for
//! 127.0.0.1/localhost shared by every API server, an admin client certificate in
//! `system:masters`, and the service-account signing key pair. For a Karmada peer also the
//! front-proxy client certificate its API server presents to aggregated API servers, and a
//! serving certificate for the Karmada components its API server calls (the aggregated
//! API server under its Service name, the webhook at 127.0.0.1).

use std::path::{Path, PathBuf};

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};

/// The common name of the front-proxy client certificate (`--requestheader-allowed-names`).
pub const FRONT_PROXY_CLIENT: &str = "front-proxy-client";

pub struct Pki {
    pub dir: PathBuf,
}

impl Pki {
    pub fn ca_crt(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }
    pub fn serving_crt(&self) -> PathBuf {
        self.dir.join("apiserver.crt")
    }
    pub fn serving_key(&self) -> PathBuf {
        self.dir.join("apiserver.key")
    }
    pub fn admin_crt(&self) -> PathBuf {
        self.dir.join("admin.crt")
    }
    pub fn admin_key(&self) -> PathBuf {
        self.dir.join("admin.key")
    }
    pub fn sa_key(&self) -> PathBuf {
        self.dir.join("sa.key")
    }
    pub fn sa_pub(&self) -> PathBuf {
        self.dir.join("sa.pub")
    }
    pub fn front_proxy_crt(&self) -> PathBuf {
        self.dir.join("front-proxy-client.crt")
    }
    pub fn front_proxy_key(&self) -> PathBuf {
        self.dir.join("front-proxy-client.key")
    }
    /// The directory and file names the Karmada components serve with.
    pub fn karmada_crt(&self) -> PathBuf {
        self.dir.join("karmada.crt")
    }
    pub fn karmada_key(&self) -> PathBuf {
        self.dir.join("karmada.key")
    }

    /// Creates the PKI in `dir` unless it is already complete there.
    pub fn ensure(dir: &Path) -> anyhow::Result<Pki> {
        let pki = Pki {
            dir: dir.to_path_buf(),
        };
        let files = [
            pki.ca_crt(),
            pki.serving_crt(),
            pki.serving_key(),
            pki.admin_crt(),
            pki.admin_key(),
            pki.sa_key(),
            pki.sa_pub(),
            pki.front_proxy_crt(),
            pki.front_proxy_key(),
            pki.karmada_crt(),
            pki.karmada_key(),
        ];
        if files.iter().all(|f| f.exists()) {
            return Ok(pki);
        }
        std::fs::create_dir_all(dir)?;
        let validity = |p: &mut CertificateParams| {
            p.not_before = rcgen::date_time_ymd(2020, 1, 1);
            p.not_after = rcgen::date_time_ymd(2099, 12, 31);
        };

        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.distinguished_name = dn(&[(DnType::CommonName, "pinfed-e2e-ca")]);
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        validity(&mut ca_params);
        let ca = ca_params.self_signed(&ca_key)?;

        let serving_key = KeyPair::generate()?;
        let mut sp = CertificateParams::new(
            [
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ]
            .map(String::from)
            .to_vec(),
        )?;
        for ip in ["127.0.0.1", "10.96.0.1"] {
            sp.subject_alt_names.push(SanType::IpAddress(ip.parse()?));
        }
        sp.distinguished_name = dn(&[(DnType::CommonName, "kube-apiserver")]);
        sp.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        sp.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        validity(&mut sp);
        let serving = sp.signed_by(&serving_key, &ca, &ca_key)?;

        let admin_key = KeyPair::generate()?;
        let mut ap = CertificateParams::new(Vec::<String>::new())?;
        ap.distinguished_name = dn(&[
            (DnType::CommonName, "pinfed-e2e-admin"),
            (DnType::OrganizationName, "system:masters"),
        ]);
        ap.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        ap.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        validity(&mut ap);
        let admin = ap.signed_by(&admin_key, &ca, &ca_key)?;

        let sa = KeyPair::generate()?;

        // The Karmada peer's API server proxies to the aggregated API server as this
        // client; the aggregated API server trusts the user headers it sends.
        let fp_key = KeyPair::generate()?;
        let mut fp = CertificateParams::new(Vec::<String>::new())?;
        fp.distinguished_name = dn(&[(DnType::CommonName, FRONT_PROXY_CLIENT)]);
        fp.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        fp.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        validity(&mut fp);
        let front_proxy = fp.signed_by(&fp_key, &ca, &ca_key)?;

        // The aggregator verifies `<service>.<namespace>.svc`; webhooks are called by URL.
        let karmada_key = KeyPair::generate()?;
        let mut kp = CertificateParams::new(
            [
                "localhost",
                "karmada-aggregated-apiserver.karmada-system.svc",
                "karmada-webhook.karmada-system.svc",
            ]
            .map(String::from)
            .to_vec(),
        )?;
        kp.subject_alt_names
            .push(SanType::IpAddress("127.0.0.1".parse()?));
        kp.distinguished_name = dn(&[(DnType::CommonName, "karmada-peer")]);
        kp.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        kp.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        validity(&mut kp);
        let karmada = kp.signed_by(&karmada_key, &ca, &ca_key)?;

        write(&pki.ca_crt(), &ca.pem())?;
        write(&dir.join("ca.key"), &ca_key.serialize_pem())?;
        write(&pki.serving_crt(), &serving.pem())?;
        write(&pki.serving_key(), &serving_key.serialize_pem())?;
        write(&pki.admin_crt(), &admin.pem())?;
        write(&pki.admin_key(), &admin_key.serialize_pem())?;
        write(&pki.sa_key(), &sa.serialize_pem())?;
        write(&pki.sa_pub(), &sa.public_key_pem())?;
        write(&pki.front_proxy_crt(), &front_proxy.pem())?;
        write(&pki.front_proxy_key(), &fp_key.serialize_pem())?;
        write(&pki.karmada_crt(), &karmada.pem())?;
        write(&pki.karmada_key(), &karmada_key.serialize_pem())?;
        Ok(pki)
    }
}

fn dn(parts: &[(DnType, &str)]) -> DistinguishedName {
    let mut d = DistinguishedName::new();
    for (t, v) in parts {
        d.push(t.clone(), *v);
    }
    d
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(text.as_bytes())?;
    Ok(())
}
