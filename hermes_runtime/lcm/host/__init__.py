"""The Hermes integration: LCM as a ``ContextEngine`` plugin, and its process-wide parts.

``hermes_plugin`` is the plugin's entry point (it needs Hermes' ``agent``
package, so only Hermes imports it); ``plugin_host`` is what the plugin runs
in the host process beside its engine (the engine shared by every copy, the
metrics port); ``hostsettings`` is what the plugin takes from the environment, read once
where Hermes registers it.
"""
