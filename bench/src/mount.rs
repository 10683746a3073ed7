//! Filesystems mounted in the bench's own mount namespace: the node's ext4 disk, tmpfs.

use crate::error::R;

use contrail_testkit::try_sh;
use std::fs::{self, File};
use std::path::PathBuf;

/// A filesystem mounted in the bench's own mount namespace (the machine never sees it),
/// unmounted on drop and its image file removed. `mount -o loop` makes the loop device clear
/// itself at the unmount, which also happens when the namespace ends with the process.
pub(crate) struct Mount {
    pub(crate) dir: PathBuf,
    image: Option<PathBuf>,
    mounted: bool,
}

impl Mount {
    /// A tmpfs of 64 MiB, with more mount `options` ("" for none).
    pub(crate) fn tmpfs(dir: PathBuf, options: &str) -> R<Mount> {
        let mut m = Mount {
            dir,
            image: None,
            mounted: false,
        };
        fs::create_dir_all(&m.dir).map_err(|e| format!("{}: {e}", m.dir.display()))?;
        try_sh(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size=64m{options}"),
                "tmpfs",
                &m.path(),
            ],
        )?;
        m.mounted = true;
        Ok(m)
    }

    /// ext4 on a loop device: a sparse 64 MiB file `image`, `mkfs.ext4 -q`, `mount -o loop`.
    pub(crate) fn ext4(image: PathBuf, dir: PathBuf) -> R<Mount> {
        let mut m = Mount {
            dir,
            image: Some(image.clone()),
            mounted: false,
        };
        File::create(&image)
            .and_then(|f| f.set_len(64 << 20))
            .map_err(|e| format!("{}: {e}", image.display()))?;
        fs::create_dir_all(&m.dir).map_err(|e| format!("{}: {e}", m.dir.display()))?;
        let image = image.to_string_lossy();
        try_sh("mkfs.ext4", &["-q", &image])?;
        try_sh("mount", &["-o", "loop", &image, &m.path()])?;
        m.mounted = true;
        Ok(m)
    }

    fn path(&self) -> String {
        self.dir.to_string_lossy().into_owned()
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        use nix::mount::{MntFlags, umount2};
        if self.mounted && umount2(&self.dir, MntFlags::empty()).is_err() {
            // Busy: detach it now, the kernel lets it go (and its loop device) when unused.
            let _ = umount2(&self.dir, MntFlags::MNT_DETACH);
        }
        if let Some(image) = &self.image {
            let _ = fs::remove_file(image);
        }
    }
}
