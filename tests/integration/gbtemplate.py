"""A template's tree for tests: the host's Python and ipykernel, hard-linked
(cp -al: seconds, where debootstrap takes minutes and needs the network)."""
import json
import os
import shutil
import subprocess

MARKER = "only-in-the-template-7c1e"


def make_tree(root):
    """A root filesystem with the host's Python and ipykernel, and what
    only this template has: /etc/template-marker, a /opt/shared its user
    (uid 1000) owns, a world-writable /usr/local/lib."""
    usr = os.path.join(root, "usr")
    os.makedirs(os.path.join(usr, "lib"))
    os.makedirs(os.path.join(usr, "share"))
    for src, dst in [("/usr/bin", "usr/bin"), ("/usr/lib64", "usr/lib64"),
                     ("/usr/lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu"),
                     ("/usr/lib/python3", "usr/lib/python3"),
                     ("/usr/lib/python3.11", "usr/lib/python3.11"),
                     ("/usr/share/jupyter", "usr/share/jupyter")]:
        subprocess.run(["cp", "-al", src, os.path.join(root, dst)], check=True)
    # Only the Python kernel works in this tree.
    kernels = os.path.join(usr, "share", "jupyter", "kernels")
    for name in os.listdir(kernels):
        if name != "python3":
            shutil.rmtree(os.path.join(kernels, name))
    for link, target in [("bin", "usr/bin"), ("sbin", "usr/bin"), ("lib", "usr/lib"),
                         ("lib64", "usr/lib64")]:
        os.symlink(target, os.path.join(root, link))
    for d in ["etc", "home", "run", "proc", "dev", "tmp", "opt/shared", "usr/local/lib"]:
        os.makedirs(os.path.join(root, d), exist_ok=True)
    os.chmod(os.path.join(root, "tmp"), 0o1777)
    os.chmod(os.path.join(root, "usr/local/lib"), 0o1777)
    os.chown(os.path.join(root, "opt/shared"), 1000, 1000)
    shutil.copy("/etc/ld.so.cache", os.path.join(root, "etc"))
    with open(os.path.join(root, "etc", "template-marker"), "w") as f:
        f.write(MARKER)


def write_kernelspec(root, name, template, env):
    """A kernelspec of the gateway's own (in root) that runs in template."""
    spec = os.path.join(root, name)
    os.mkdir(spec)
    with open(os.path.join(spec, "kernel.json"), "w") as f:
        json.dump({"argv": ["python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                   "display_name": f"Python in {template}", "language": "python",
                   "env": env, "metadata": {"glovebox": {"template": template}}}, f)
