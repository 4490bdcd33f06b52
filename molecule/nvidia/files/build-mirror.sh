#!/bin/sh
# TEST DOUBLE of NVIDIA's CUDA repository (molecule/nvidia only): a flat apt repository of empty
# look-alike packages with NVIDIA's names and version scheme, signed with a throwaway key, so the
# roles' repository, pinning, exact-version and hold logic run against apt for real.
set -eu
out=/srv/mirror
rm -rf "$out" /tmp/pkgs && mkdir -p "$out" /tmp/pkgs
cd /tmp/pkgs

# package NAME VERSION [DEPENDS] [FILE:DEST ...]
package() {
    name=$1 version=$2 depends=$3; shift 3
    root=/tmp/pkgs/$name-$version
    mkdir -p "$root/DEBIAN"
    {
        echo "Package: $name"
        echo "Version: $version"
        echo "Architecture: all"
        echo "Maintainer: kiln tests <kiln@example.invalid>"
        [ -n "$depends" ] && echo "Depends: $depends"
        echo "Description: kiln test double of $name"
    } > "$root/DEBIAN/control"
    for spec in "$@"; do
        src=${spec%%:*} dest=${spec#*:}
        mkdir -p "$root$(dirname "$dest")"
        sed "s/@VERSION@/${version%%-*}/" "$src" > "$root$dest"
        chmod 0755 "$root$dest"
    done
    dpkg-deb --root-owner-group --build "$root" "$out/${name}_${version}_all.deb" >/dev/null
}

cat > /tmp/sleeper.service <<'UNIT'
[Unit]
Description=kiln test double of an NVIDIA daemon
[Service]
ExecStart=/bin/sleep infinity
[Install]
WantedBy=multi-user.target
UNIT
sed 's/^Description=.*/Description=test double of nvidia-persistenced/' /tmp/sleeper.service > /tmp/persistenced.service
sed 's/^Description=.*/Description=test double of nvidia-fabricmanager/' /tmp/sleeper.service > /tmp/fabricmanager.service

for version in 535.183.06-1 550.127.05-1; do
    branch=${version%%.*}
    package nvidia-smi "$version" "" /srv/build/nvidia-smi:/usr/bin/nvidia-smi
    package nvidia-kernel-dkms "$version" ""
    package nvidia-kernel-open-dkms "$version" ""
    package nvidia-persistenced "$version" "" /tmp/persistenced.service:/lib/systemd/system/nvidia-persistenced.service
    package nvidia-driver "$version" "nvidia-smi (= $version), nvidia-kernel-dkms (= $version) | nvidia-kernel-open-dkms (= $version)"
    package "nvidia-fabricmanager-$branch" "$version" "" /tmp/fabricmanager.service:/lib/systemd/system/nvidia-fabricmanager.service
    package "libnvidia-nscq-$branch" "$version" ""
done
# CUDA 12.2 update 2 split as NVIDIA's repository splits it: nvcc (the double replaying the
# recorded nvcc 12.2.140), its crt headers and the runtime's development files, which the nccl
# role installs to build nccl-tests, and the toolkit meta package that depends on them.
package cuda-crt-12-2 12.2.140-1 ""
package cuda-nvcc-12-2 12.2.140-1 "cuda-crt-12-2 (= 12.2.140-1)" \
    /srv/build/nvcc:/usr/local/cuda-12.2/bin/nvcc \
    /srv/build/cuda_12.2.140.txt:/usr/local/cuda-12.2/share/kiln-test/nvcc-version.txt
package cuda-cudart-dev-12-2 12.2.140-1 ""
package cuda-toolkit-12-2 12.2.2-1 "cuda-nvcc-12-2 (= 12.2.140-1), cuda-cudart-dev-12-2 (= 12.2.140-1)"
package libnccl2 2.18.5-1+cuda12.2 ""
package libnccl-dev 2.18.5-1+cuda12.2 "libnccl2 (= 2.18.5-1+cuda12.2)"
package libnccl2 2.20.5-1+cuda12.4 ""
package libnccl-dev 2.20.5-1+cuda12.4 "libnccl2 (= 2.20.5-1+cuda12.4)"

# A source archive for the checksum test of the nccl-tests download.
mkdir -p /tmp/nccl-tests-9.9.9 && echo "all:" > /tmp/nccl-tests-9.9.9/Makefile
tar -C /tmp -czf "$out/nccl-tests-9.9.9.tar.gz" nccl-tests-9.9.9
sha256sum "$out/nccl-tests-9.9.9.tar.gz" | cut -d' ' -f1 > "$out/nccl-tests-9.9.9.sha256"

cd "$out"
apt-ftparchive packages . > Packages
apt-ftparchive release . > Release
export GNUPGHOME=/root/.kiln-mirror-gnupg
rm -rf "$GNUPGHOME" && mkdir -m 0700 "$GNUPGHOME"
gpg --batch --quiet --passphrase '' --quick-generate-key "kiln test mirror <mirror@example.invalid>" rsa2048 sign never
gpg --batch --quiet --clearsign -o InRelease Release
gpg --batch --quiet --armor --export > kiln-mirror.pub
gpg --batch --with-colons --list-keys | awk -F: '/^fpr/ {print $10; exit}' > fingerprint
