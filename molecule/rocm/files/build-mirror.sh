#!/bin/sh
# TEST DOUBLE of AMD's ROCm repositories (molecule/rocm only): repo.radeon.com's two apt
# repositories per release, amdgpu/<release>/ubuntu and rocm/apt/<release> (suite jammy,
# component main, Origin repo.radeon.com), for ROCm 6.2.4 and 6.3.3 (the upgrade), of empty
# look-alike packages with AMD's names and version scheme (the release's packed build, 60204 or
# 60303, in every version; hip-runtime-amd depends on hsa-rocr as AMD's does), signed with a
# throwaway key served where AMD serves its key (rocm/rocm.gpg.key). Beside them, a repository
# standing in for Ubuntu's own ROCm packages (another origin, higher versions), which the role's
# origin pin must lose to.
set -eu
out=/srv/mirror
rm -rf "$out" /tmp/pkgs && mkdir -p "$out" /tmp/pkgs

# package REPO NAME VERSION [DEPENDS]: an empty package into REPO's pool
package() {
    repo=$1 name=$2 version=$3 depends=${4:-}
    root=/tmp/pkgs/$name-$version
    mkdir -p "$root/DEBIAN" "$out/$repo/pool/main"
    {
        echo "Package: $name"
        echo "Version: $version"
        echo "Architecture: all"
        echo "Maintainer: kiln tests <kiln@example.invalid>"
        [ -n "$depends" ] && echo "Depends: $depends"
        echo "Description: kiln test double of $name"
    } > "$root/DEBIAN/control"
    dpkg-deb --root-owner-group --build "$root" "$out/$repo/pool/main/${name}_${version#*:}_all.deb" >/dev/null
}

# index REPO SUITE ORIGIN: Packages and a Release naming their hashes, as a dists/ tree
index() {
    repo=$1 suite=$2 origin=$3
    dists=$out/$repo/dists/$suite
    mkdir -p "$dists/main/binary-amd64"
    (cd "$out/$repo" && apt-ftparchive packages pool > "dists/$suite/main/binary-amd64/Packages")
    (cd "$dists" && apt-ftparchive -o "APT::FTPArchive::Release::Origin=$origin" \
        -o "APT::FTPArchive::Release::Suite=$suite" -o "APT::FTPArchive::Release::Codename=$suite" \
        -o "APT::FTPArchive::Release::Components=main" \
        -o "APT::FTPArchive::Release::Architectures=amd64" release . > /tmp/Release)
    mv /tmp/Release "$dists/Release"
    gpg --batch --quiet --yes --clearsign -o "$dists/InRelease" "$dists/Release"
}

export GNUPGHOME=/root/.kiln-mirror-gnupg
rm -rf "$GNUPGHOME" && mkdir -m 0700 "$GNUPGHOME"
gpg --batch --quiet --passphrase '' --quick-generate-key "kiln test mirror <mirror@example.invalid>" rsa2048 sign never

# release amdgpu-release: the release's two repositories, its packages at its packed build
release() {
    rel=$1 amdgpu=$2
    build=$(echo "$rel" | awk -F. '{printf "%d%02d%02d", $1, $2, $3}')
    package "amdgpu/$rel/ubuntu" amdgpu-dkms "1:$amdgpu.$build-2111901.22.04"
    for spec in rocm-core:$rel rocm-smi-lib:7.3.0 amd-smi-lib:24.6.3 rocminfo:1.0.0 \
            rccl:2.20.5 hsa-rocr:1.14.0; do
        package "rocm/apt/$rel" "${spec%%:*}" "${spec#*:}.$build-139~22.04"
    done
    package "rocm/apt/$rel" hip-runtime-amd "6.2.41134.$build-139~22.04" "hsa-rocr (>= 1.14.0)"
    index "amdgpu/$rel/ubuntu" jammy repo.radeon.com
    index "rocm/apt/$rel" jammy repo.radeon.com
}
release 6.2.4 6.8.5
release 6.3.3 6.10.5

# Ubuntu's own ROCm packages stand-in: rocminfo at a higher version, unsigned (trusted=yes)
package distro rocminfo 6.4.0-1
(cd "$out/distro" && apt-ftparchive packages pool > Packages)

mkdir -p "$out/rocm"
gpg --batch --quiet --armor --export > "$out/rocm/rocm.gpg.key"
gpg --batch --with-colons --list-keys | awk -F: '/^fpr/ {print $10; exit}' > "$out/fingerprint"
