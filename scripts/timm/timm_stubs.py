"""Stand-ins for packages timm imports at import time but never uses to build a model (torchvision, PIL,
huggingface_hub, safetensors): any attribute is another stub, calling one returns it, subclassing one
gives `object`. Used by state_dict_keys.py and parity.py to run timm's real model code on a torch build
that torchvision's compiled ops do not load against."""
import importlib.machinery
import sys
import types


class StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        sub = StubModule(self.__name__ + "." + name)
        sub.__spec__ = importlib.machinery.ModuleSpec(sub.__name__, None)
        sub.__path__ = []
        sys.modules[sub.__name__] = sub
        return sub

    def __call__(self, *args, **kwargs):
        return self

    def __mro_entries__(self, bases):
        return (object,)


class StubFinder:
    def __init__(self, prefixes):
        self.prefixes = tuple(prefixes)

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.prefixes:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        m = StubModule(spec.name)
        m.__path__ = []
        m.__version__ = "10.0.0"
        return m

    def exec_module(self, module):
        pass
