# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Offline stand-in for the get-pip.py that ansible-test downloads.

ansible-test bootstraps pip into each sanity-test virtual environment by running
``~/.ansible/test/cache/get_pip_<X>_<Y>.py`` (fetched from a host these machines
cannot reach). `make ansible-test-cache` copies this file there under that name,
beside the pip <X>.<Y> wheel downloaded from PyPI, so the bootstrap installs that
wheel without network access. Arguments are those ansible-test passes to
get-pip.py: pip options and the requirement ``pip==<X>.<Y>``.
"""

from __future__ import annotations

import os
import sys

OPTIONS_WITHOUT_PIP_EQUIVALENT = ('--no-setuptools', '--no-wheel')


def main() -> int:
    cache_dir = os.path.dirname(os.path.abspath(__file__))
    version = os.path.splitext(os.path.basename(__file__))[0][len('get_pip_'):].replace('_', '.')
    wheel = os.path.join(cache_dir, 'pip-%s-py3-none-any.whl' % version)

    if not os.path.isfile(wheel):
        sys.stderr.write('missing %s: run `make ansible-test-cache`\n' % wheel)
        return 1

    sys.path.insert(0, wheel)

    from pip._internal.cli.main import main as pip_main  # pylint: disable=import-outside-toplevel

    args = [arg for arg in sys.argv[1:] if arg not in OPTIONS_WITHOUT_PIP_EQUIVALENT]

    return pip_main(['install', '--no-index', '--find-links', cache_dir] + args)


if __name__ == '__main__':
    sys.exit(main())
